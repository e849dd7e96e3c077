"""The compiled router (signal plan, matched-mask decision table, no-match fast path, one walk for the keyword
text) answers exactly what a straightforward full evaluation answers, over generated configs and requests.

Property-style with a seeded generator (reproducible: a failure names its seed). The generated configs mix
what each shortcut depends on: predicate leaves (no table), external signals (no table lookup), too many
referenced rules for the whole table (only the no-match entry), catch-all and NOT decisions (answers when
nothing matched), empty nodes inside trees, ties, tiers and both strategies; requests cover the three protocols and keyword texts that are
ASCII, non-ASCII and case-folded (the substring prefilter).
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from policies.routing import Router, parse_router_config
from policies.routing.config import SOURCE_TYPES
from tests.unit.policies.routing import reference_router

WORDS = [
    "urgent",
    "URGENT",
    "asap",
    "hello",
    "straße",
    "STRASSE",
    "İstanbul",
    "kelvin",
    "\u212aelvin",
    "简短",
    "a.b",
]
KEYWORDS = ["urgent", "asap", "strasse", "straße", "istanbul", "kelvin", "简短", "a.b", "Kelvin", "ı"]
KINDS = ["conversation", "keyword", "Conversation", "domain", "classifier", "pii"]
ROLES = ["user", "assistant", "system", "developer", "tool", "non_user", None]


def _conversation_rule(rng: random.Random, name: str) -> dict[str, Any]:
    source = rng.choice(SOURCE_TYPES)
    src: dict[str, Any] = {"type": source}
    if source == "message" and (role := rng.choice(ROLES)) is not None:
        src["role"] = role
    if rng.random() < 0.4:
        return {"name": name, "feature": {"type": "exists", "source": src}}
    rule: dict[str, Any] = {"name": name, "feature": {"type": "count", "source": src}}
    if rng.random() < 0.85:
        low, high = rng.randint(0, 3), rng.randint(3, 6)
        rule["predicate"] = rng.choice([{"gte": low}, {"gt": low}, {"lt": high}, {"gte": low, "lte": high}])
    return rule


def _keyword_rule(rng: random.Random, name: str) -> dict[str, Any]:
    return {
        "name": name,
        "operator": rng.choice(["AND", "OR", "NOR"]),
        "keywords": rng.sample(KEYWORDS, rng.randint(1, 3)),
        "case_sensitive": rng.random() < 0.2,
    }


def _leaf(rng: random.Random, names: dict[str, list[str]], predicates: bool) -> dict[str, Any]:
    kind = rng.choice(KINDS)
    # a conversation or keyword leaf names a declared rule (anything else is a config error); other types name
    # what external signals may bring
    pool = names[kind.lower()] if kind.lower() in names else ["x", "MULTI"]
    if not pool:
        kind, pool = "domain", ["x", "MULTI"]
    leaf: dict[str, Any] = {"type": kind, "name": rng.choice(pool)}
    if predicates and rng.random() < 0.3:
        leaf["predicate"] = rng.choice([{"gte": 1}, {"gt": 0.5}, {"lt": 2}])
        if rng.random() < 0.3:
            leaf["on_error"] = "match"
    return leaf


def _tree(rng: random.Random, names: dict[str, list[str]], depth: int, predicates: bool) -> dict[str, Any]:
    if depth == 0 or rng.random() < 0.35:
        return _leaf(rng, names, predicates)
    operator = rng.choice(["AND", "OR", "NOT", "not", "XOR", ""])
    n = 1 if operator.upper() == "NOT" and rng.random() < 0.8 else rng.randint(0, 3)
    children: list[Any] = [_tree(rng, names, depth - 1, predicates) for _ in range(n)]
    if rng.random() < 0.05:
        children.append({})  # an empty node inside a tree is an operator without children, not "always"
    return {"operator": operator, "conditions": children}


def generated_config(rng: random.Random) -> dict[str, Any]:
    many = rng.random() < 0.15  # too many referenced rules for the whole table: only the no-match entry
    n_conv = rng.randint(14, 16) if many else rng.randint(0, 6)
    conversation = [_conversation_rule(rng, f"c{i}") for i in range(n_conv)]
    keyword = [_keyword_rule(rng, f"k{i}") for i in range(rng.randint(0, 3))]
    names = {"conversation": [r["name"] for r in conversation], "keyword": [r["name"] for r in keyword]}
    predicates = rng.random() < 0.3
    tiers = rng.random() < 0.2
    decisions = []
    for i in range(rng.randint(1, 6)):
        decision: dict[str, Any] = {
            "name": rng.choice(["a", "b", "c", "d"]) + str(i),
            "priority": rng.choice([1, 5, 5, 10]),
            "modelRefs": [{"model": f"m{i}"}] if rng.random() < 0.8 else [],
        }
        if tiers and rng.random() < 0.5:
            decision["tier"] = rng.randint(1, 2)
        if rng.random() < 0.85:
            decision["rules"] = _tree(rng, names, 3, predicates)
        decisions.append(decision)
    if many:
        every = [{"type": "conversation", "name": r["name"]} for r in conversation]
        decisions.append({"name": "every", "priority": 1, "rules": {"operator": "AND", "conditions": every}})
    return {
        "routing": {
            "strategy": rng.choice(["priority", "confidence"]),
            "signals": {"conversation": conversation, "keyword": keyword},
            "decisions": decisions,
        },
        "providers": {"defaults": {"default_model": "default"}},
    }


def _content(rng: random.Random, parts: str) -> Any:
    text = " ".join(rng.sample(WORDS, rng.randint(0, 3)))
    if rng.random() < 0.5:
        return text
    return [{"type": parts, "text": text}, {"type": rng.choice(["image_url", "input_image", "image"])}]


def _chat_messages(rng: random.Random) -> list[Any]:
    messages: list[Any] = []
    for _ in range(rng.randint(0, 8)):
        role = rng.choice(["user", "user", "assistant", "tool", "system", "developer", "function"])
        message: dict[str, Any] = {"role": role, "content": _content(rng, "text")}
        if role == "assistant" and rng.random() < 0.5:
            message["tool_calls"] = [{"id": f"call_{j}"} for j in range(rng.randint(0, 2))]
        if role == "tool":
            message["tool_call_id"] = rng.choice(["call_0", "flowtool_s__c"])
        messages.append(message)
    if messages and rng.random() < 0.05:
        messages.insert(rng.randrange(len(messages)), "not a message")  # the walk skips it
    return messages


def generated_request(rng: random.Random) -> tuple[dict[str, Any], str]:
    protocol = rng.choice(["openai-chat", "openai-chat", "anthropic-messages", "openai-responses"])
    request: dict[str, Any] = {"model": rng.choice(["auto", "mine", None])}
    if request["model"] is None:
        del request["model"]
    request["tools"] = [{"type": "function"}] * rng.randint(0, 4)
    if protocol == "anthropic-messages":
        request["tool_choice"] = rng.choice([{"type": "any"}, {"type": "none"}, {"type": "auto"}])
        request["messages"] = [
            {
                "role": rng.choice(["user", "assistant"]),
                "content": [{"type": "text", "text": rng.choice(WORDS)}],
            }
            for _ in range(rng.randint(0, 4))
        ]
    elif protocol == "openai-responses":
        request["input"] = rng.choice(
            [
                rng.choice(WORDS),
                [{"role": "user", "content": _content(rng, "input_text")}, {"type": "function_call"}],
            ]
        )
    else:
        request["tool_choice"] = rng.choice(["auto", "required", "none"])
        request["messages"] = _chat_messages(rng)
    return request, protocol


def generated_external(rng: random.Random, config: dict[str, Any]) -> list[dict[str, Any]]:
    if rng.random() < 0.6:
        return []
    rules = config["routing"]["signals"]
    internal = {f"{kind}:{r['name']}".lower() for kind in ("conversation", "keyword") for r in rules[kind]}
    external = []
    for _ in range(rng.randint(1, 3)):
        item: dict[str, Any] = {"type": rng.choice(KINDS), "name": rng.choice(["x", "c0", "k0", "MULTI"])}
        if f"{item['type']}:{item['name']}".lower() in internal:
            item["type"] = "domain"  # an external signal may not name one of the config's rules (refused)
        if rng.random() < 0.3:
            item["confidence"] = rng.choice([0.0, 0.4, 0.9])
        if rng.random() < 0.3:
            item["value"] = rng.choice([0.0, 1.0, 3.0])
        if rng.random() < 0.2:
            item["error"] = "timeout"
        external.append(item)
    return external


SEEDS = range(400)


@pytest.mark.parametrize("seed", SEEDS)
def test_compiled_router_agrees_with_the_full_evaluation(seed: int) -> None:
    """For any config and request, route() equals the reference evaluation (facts, signals, decision, model)."""
    rng = random.Random(seed)
    data = generated_config(rng)
    config = parse_router_config(data)
    router = Router(config)
    for _ in range(12):
        request, protocol = generated_request(rng)
        external = generated_external(rng, data)
        assert router.route(request, protocol, external) == reference_router.route(
            config, request, protocol, external
        )


def _path(router: Router, request: dict[str, Any], protocol: str, external: list[dict[str, Any]]) -> str:
    """Which way route() decides: the precomputed table, its no-match entry, or tree evaluation."""
    signals = router.route(request, protocol, external)["signals"]
    internal = [v for k, v in signals.items() if k.startswith(("conversation:", "keyword:"))]
    table = router._decisions.by_mask
    if external or not table:
        return "trees"
    if not any(v["matched"] for v in internal):
        return "no match, whole table" if len(table) > 1 else "no match, only that entry"
    return "table" if len(table) > 1 else "trees"


def test_the_generated_cases_exercise_every_path() -> None:
    """The property above covers the table, the no-match entry (with and without the whole table) and tree
    evaluation, each many times."""
    paths: Counter[str] = Counter()
    for seed in SEEDS:
        rng = random.Random(seed)
        data = generated_config(rng)
        router = Router(parse_router_config(data))
        for _ in range(12):
            request, protocol = generated_request(rng)
            paths[_path(router, request, protocol, generated_external(rng, data))] += 1
    assert len(paths) == 4 and min(paths.values()) >= 100, paths


class TestFastPath:
    CONFIG = {
        "routing": {
            "signals": {
                "conversation": [
                    {
                        "name": "tools",
                        "feature": {"type": "count", "source": {"type": "tool_definition"}},
                        "predicate": {"gte": 3},
                    }
                ],
                "keyword": [{"name": "urgent", "operator": "OR", "keywords": ["urgent"]}],
            },
            "decisions": [
                {"name": "coding", "priority": 20, "rules": {"type": "domain", "name": "code"}},
                {"name": "agentic", "priority": 10, "rules": {"type": "conversation", "name": "tools"}},
                {
                    "name": "calm",
                    "priority": 5,
                    "rules": {"operator": "NOT", "conditions": [{"type": "keyword", "name": "urgent"}]},
                },
            ],
        }
    }

    def test_no_match_request_gets_the_full_evaluations_answer(self) -> None:
        """A request that matches no rule is answered from the precomputed entry, and that entry is what a
        full evaluation gives (here the NOT decision), with published values intact."""
        config = parse_router_config(self.CONFIG)
        router = Router(config)
        request = {"messages": [{"role": "user", "content": "hello"}], "tools": [{}, {}]}
        result = router.route(request)
        assert result == reference_router.route(config, request)
        assert result["decision"]["name"] == "calm" and result["decision"]["matchedRules"] == []
        assert result["signals"]["conversation:tools"] == {"value": 2.0, "matched": False, "confidence": 0.0}

    def test_precomputed_answers_are_not_shared_between_results(self) -> None:
        """Mutating one result's decision does not change the next result (fresh lists and dicts each time)."""
        router = Router(parse_router_config(self.CONFIG))
        request = {"messages": [{"role": "user", "content": "urgent"}], "tools": [{}, {}, {}]}
        first = router.route(request)
        first["decision"]["matchedRules"].append("tampered")
        first["decision"]["modelRefs"].append({"model": "tampered"})
        assert router.route(request)["decision"]["matchedRules"] == ["conversation:tools"]
        assert router.route(request)["decision"]["modelRefs"] == []

    def test_external_signals_bypass_the_table(self) -> None:
        """An external signal can change the answer for the same matched rules, so it is never looked up."""
        router = Router(parse_router_config(self.CONFIG))
        request = {"messages": [{"role": "user", "content": "hello"}]}
        assert router.route(request)["decision"]["name"] == "calm"
        external = [{"type": "domain", "name": "code", "confidence": 0.5}]
        decision = router.route(request, "openai-chat", external)["decision"]
        assert decision["name"] == "coding" and decision["confidence"] == 0.5


class TestKeywordPrefilter:
    @pytest.mark.parametrize(
        ("keyword", "case_sensitive", "text"),
        [
            ("kelvin", False, "\u212aelvin"),  # KELVIN SIGN folds to k under re.IGNORECASE
            ("strasse", False, "STRASSE"),
            ("istanbul", False, "İstanbul"),
            ("ı", False, "I"),
            ("Kelvin", True, "kelvin"),
            ("urgent", False, "so URGENT!"),
            ("urgent", False, "urgently"),
        ],
    )
    def test_same_answer_as_the_regex(self, keyword: str, case_sensitive: bool, text: str) -> None:
        """The substring check before the regex never changes whether a keyword matches."""
        data = {
            "routing": {
                "signals": {
                    "keyword": [
                        {
                            "name": "k",
                            "operator": "OR",
                            "keywords": [keyword],
                            "case_sensitive": case_sensitive,
                        }
                    ]
                },
                "decisions": [{"name": "d", "rules": {"type": "keyword", "name": "k"}}],
            }
        }
        router = Router(parse_router_config(data))
        matched = router.route({"messages": [{"role": "user", "content": text}]})["signals"]["keyword:k"][
            "matched"
        ]
        assert matched is reference_router.keyword_hit(keyword, case_sensitive, text)


def test_keyword_text_from_a_message_the_walk_skips() -> None:
    """A latest user message that is a mapping but not a plain dict is skipped by the facts walk yet still
    gives the keyword text, as the lookup did before the walk also found it."""
    from collections import OrderedDict

    data = {
        "routing": {
            "signals": {"keyword": [{"name": "k", "operator": "OR", "keywords": ["urgent"]}]},
            "decisions": [{"name": "d", "rules": {"type": "keyword", "name": "k"}}],
        }
    }
    config = parse_router_config(data)
    request = {"messages": [{"role": "user", "content": "calm"}, OrderedDict(role="user", content="urgent")]}
    result = Router(config).route(request)
    assert result == reference_router.route(config, request)
    assert result["decision"]["name"] == "d" and result["facts"]["userMessageCount"] == 1
