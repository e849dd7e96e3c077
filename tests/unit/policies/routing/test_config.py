"""Config validation with vLLM Semantic Router's exact messages (reference §3.2)."""

from __future__ import annotations

from typing import Any

import pytest

from policies.routing import ConfigError, load_router_text, parse_router_config


def _conv(*rules: dict[str, Any]) -> dict[str, Any]:
    return {
        "routing": {"signals": {"conversation": list(rules)}, "decisions": [{"name": "d", "priority": 1}]}
    }


def _errors(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_router_config(data)
    return info.value.errors


COUNT_USER = {"type": "count", "source": {"type": "message", "role": "user"}}


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ({"feature": COUNT_USER}, "conversation rule [0]: name is required"),
        (
            {"name": "r", "feature": {"type": "sum", "source": {"type": "message"}}},
            'conversation rule [0] "r": unsupported feature.type "sum"; valid types: count, exists',
        ),
        (
            {"name": "r", "feature": {"type": "count", "source": {"type": "tokens"}}},
            'conversation rule [0] "r": unsupported feature.source.type "tokens"; valid types: message, tool_definition, '
            "tool_choice_required, tool_choice_none, assistant_tool_call, assistant_tool_cycle, active_tool_loop, "
            "flow_tool_state, image_content",
        ),
        (
            {
                "name": "r",
                "feature": {"type": "count", "source": {"type": "tool_definition", "role": "user"}},
            },
            'conversation rule [0] "r": source.role is only valid when source.type is "message", got source.type "tool_definition"',
        ),
        (
            {"name": "r", "feature": {"type": "count", "source": {"type": "message", "role": "bot"}}},
            'conversation rule [0] "r": unsupported source.role "bot"; valid roles: user, assistant, system, developer, tool, non_user',
        ),
        (
            {"name": "r", "feature": COUNT_USER, "predicate": {"gte": float("inf")}},
            'conversation rule [0] "r": predicate values must be finite',
        ),
        (
            {"name": "r", "feature": COUNT_USER, "predicate": {"gte": float("nan")}},
            'conversation rule [0] "r": predicate values must be finite',
        ),
        (
            {"name": "r", "feature": COUNT_USER, "predicate": {}},
            'conversation rule [0] "r": predicate must set at least one comparator',
        ),
        (
            {"name": "r", "feature": COUNT_USER, "predicate": {"gt": 1, "gte": 2}},
            'conversation rule [0] "r": predicate cannot set both gt and gte',
        ),
        (
            {"name": "r", "feature": COUNT_USER, "predicate": {"lt": 1, "lte": 2}},
            'conversation rule [0] "r": predicate cannot set both lt and lte',
        ),
        (
            {"name": "r", "feature": COUNT_USER, "predicate": {"gte": 5, "lte": 2}},
            'conversation rule [0] "r": predicate defines an empty numeric range',
        ),
        (
            {"name": "r", "feature": COUNT_USER, "predicate": {"gt": 3, "lte": 3}},
            'conversation rule [0] "r": predicate defines an empty numeric range',
        ),
        (
            {"name": "r", "feature": COUNT_USER, "predicate": {"gte": 3, "lt": 3}},
            'conversation rule [0] "r": predicate defines an empty numeric range',
        ),
        (
            {
                "name": "r",
                "feature": {"type": "exists", "source": {"type": "image_content"}},
                "predicate": {"gte": 1},
            },
            'conversation rule [0] "r": feature.type "exists" does not accept a predicate',
        ),
        # the predicate is checked before the feature
        (
            {"name": "r", "feature": {"type": "sum"}, "predicate": {}},
            'conversation rule [0] "r": predicate must set at least one comparator',
        ),
        (
            {"name": "r", "feature": COUNT_USER, "predicate": {"eq": 2}},
            "conversation rule [0] \"r\": predicate has unsupported comparator 'eq'; valid comparators: gt, gte, lt, lte",
        ),
    ],
)
def test_conversation_rule_messages(rule: dict[str, Any], message: str) -> None:
    """Each invalid rule is reported with the reference's exact words."""
    assert _errors(_conv(rule)) == [message]


def test_duplicate_name_and_every_error_collected() -> None:
    """Duplicates are named with their index; all problems are reported together."""
    rules = [
        {"name": "a", "feature": COUNT_USER},
        {"name": "a", "feature": COUNT_USER},
        {"name": "b", "feature": {"type": "nope", "source": {"type": "message"}}},
    ]
    assert _errors(_conv(*rules)) == [
        'conversation rule [1]: duplicate name "a"',
        'conversation rule [2] "b": unsupported feature.type "nope"; valid types: count, exists',
    ]


def test_valid_edge_cases() -> None:
    """A count rule without predicate, equality and ranges as two bounds, and an empty role are all valid."""
    cfg = parse_router_config(
        _conv(
            {"name": "a", "feature": COUNT_USER},
            {"name": "b", "feature": COUNT_USER, "predicate": {"gte": 3, "lte": 3}},
            {
                "name": "c",
                "feature": {"type": "count", "source": {"type": "message", "role": ""}},
                "predicate": {"gte": 2, "lt": 5},
            },
        )
    )
    assert [r.name for r in cfg.conversation] == ["a", "b", "c"]
    assert cfg.conversation[0].predicate is None


def test_keyword_and_decision_errors() -> None:
    """Keyword operators are validated; decisions need names; strategy must be known."""
    data = {
        "routing": {
            "strategy": "random",
            "signals": {
                "keyword": [
                    {"name": "k", "operator": "XOR", "keywords": ["a"]},
                    {"name": "j", "operator": "OR", "keywords": []},
                ]
            },
            "decisions": [{"priority": 1}, {"name": "d", "priority": "high"}],
        }
    }
    assert _errors(data) == [
        'unsupported routing.strategy "random"; valid strategies: priority, confidence',
        'unsupported keyword rule operator: "XOR" for rule "k"',
        'keyword rule [1] "j": keywords must be a non-empty list of strings',
        "decision [0]: name is required",
        'decision [1] "d": priority must be an integer',
    ]


def test_unknown_decision_operator_is_not_a_config_error() -> None:
    """Operators are not validated (an unknown one acts as OR at runtime)."""
    parse_router_config(
        {"routing": {"decisions": [{"name": "d", "rules": {"operator": "XOR", "conditions": []}}]}}
    )


def test_yaml12_and_yaml_errors() -> None:
    """YAML is read as 1.2 (a name 'on' stays a string); broken YAML names line and column."""
    router = load_router_text("routing:\n  decisions:\n    - name: on\n      priority: 1\n")
    assert router.config.decisions[0].name == "on"
    with pytest.raises(ConfigError) as info:
        load_router_text("routing: [\n", source="cfg.yaml")
    assert info.value.errors[0].startswith("cfg.yaml:2:1: invalid YAML")
    with pytest.raises(ConfigError, match="routing is required"):
        load_router_text("providers: {}\n")


def test_an_integer_beyond_the_float_range_is_not_finite() -> None:
    """A predicate bound of 10**400 is 'predicate values must be finite', not an OverflowError."""
    rule = {"name": "r", "feature": {"type": "count", "source": {"type": "tool_definition"}}}
    assert _errors(_conv({**rule, "predicate": {"gte": 10**400}})) == [
        'conversation rule [0] "r": predicate values must be finite'
    ]
    leaf = {"type": "domain", "name": "x", "predicate": {"lt": -(10**400)}}
    data = {"routing": {"decisions": [{"name": "d", "rules": leaf}]}}
    assert _errors(data) == ['decision [0] "d": rules: predicate values must be finite']


def _not_chain(depth: int) -> str:
    tree = "{type: domain, name: x}"
    for _ in range(depth):
        tree = "{operator: NOT, conditions: [" + tree + "]}"
    return f"routing:\n  decisions:\n    - name: d\n      rules: {tree}\n"


@pytest.mark.parametrize("depth", [40, 3000])
def test_deep_rule_trees_are_config_errors(depth: int) -> None:
    """A rule tree nested deeper than 32 rules is one error, and one nested 3000 deep (too deep for the YAML
    parser) is a ConfigError too, never a RecursionError."""
    with pytest.raises(ConfigError) as info:
        load_router_text(_not_chain(depth), source="deep.yaml")
    assert len(info.value.errors) == 1
    if depth == 40:
        assert info.value.errors == ['decision [0] "d": rules: nested deeper than 32 rules']
    else:
        assert info.value.errors[0].startswith("deep.yaml: ")
    load_router_text(_not_chain(30))  # 31 rules deep: fine


def test_the_keywords_spelling_is_the_keyword_family() -> None:
    """vLLM's tutorials write ``signals.keywords``: its rules load as ``keyword`` rules; both spellings at once
    is an error."""
    text = """
routing:
  signals:
    keywords:
      - {name: urgent, operator: OR, keywords: [urgent]}
  decisions:
    - name: urgent
      rules: { type: keyword, name: urgent }
"""
    router = load_router_text(text)
    answer = router.route({"messages": [{"role": "user", "content": "this is urgent"}]}, "openai-chat", [])
    assert answer["decision"]["name"] == "urgent"
    both = text.replace("  decisions:", "    keyword: []\n  decisions:")
    with pytest.raises(ConfigError) as info:
        load_router_text(both)
    assert info.value.errors[0] == (
        "routing.signals has both keyword and keywords: give the keyword rules under one of them"
    )


def test_unknown_keys_and_undeclared_rules_name_their_path() -> None:
    """A misspelt section (signals.keywords, a stray routing.decision) and a leaf naming a rule that is not
    declared for its type are errors naming where they are, instead of rules silently missing."""
    text = """
routing:
  signals:
    keywords:
      - {name: urgent, operator: OR, keywords: [urgent]}
  decisions:
    - name: urgent
      rules: { type: keyword, name: urgent }
    - name: typo
      rules: { operator: OR, conditions: [ {type: domain, name: x}, {type: conversation, name: no_such_rule} ] }
  strategy: priority
  decision: []
  projections: []
"""
    with pytest.raises(ConfigError) as info:
        load_router_text(text)
    assert info.value.errors == [
        "unknown key routing.decision; valid keys: strategy, signals, decisions",  # not projections: vLLM's
        'decision [1] "typo": rules.conditions[1]: conversation rule "no_such_rule" is not declared in '
        "routing.signals.conversation",
    ]


@pytest.mark.parametrize(
    ("ref", "problem"),
    [("{model: m, weight: .inf}", "numbers must be finite"), ("{model: m, since: 2024-01-01}", "a date")],
)
def test_model_refs_must_be_json(ref: str, problem: str) -> None:
    """modelRefs are answered as they are, so a non-finite number or a date is a config error (it was a 500 on
    every route)."""
    with pytest.raises(ConfigError) as info:
        load_router_text(f"routing:\n  decisions:\n    - name: d\n      modelRefs: [{ref}]\n")
    assert len(info.value.errors) == 1 and problem in info.value.errors[0]
