"""Rule evaluation, decision trees, selection and model choice (reference §3.4-3.5)."""

from __future__ import annotations

from typing import Any

import pytest

from policies.routing import ConfigError, NoDecisionsConfigured, Router, parse_router_config


def _router(
    decisions: list[dict[str, Any]],
    conversation: list[dict[str, Any]] | None = None,
    keyword: list[dict[str, Any]] | None = None,
    strategy: str = "priority",
    default_model: str | None = "default-model",
) -> Router:
    data: dict[str, Any] = {
        "routing": {
            "strategy": strategy,
            "signals": {"conversation": conversation or [], "keyword": keyword or []},
            "decisions": decisions,
        }
    }
    if default_model:
        data["providers"] = {"defaults": {"default_model": default_model}}
    return Router(parse_router_config(data))


def _leaf(kind: str, name: str, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "name": name, **extra}


def _decision(name: str, rules: dict[str, Any] | None, priority: int = 0, **extra: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": name,
        "priority": priority,
        "modelRefs": [{"model": f"{name}-model"}],
        **extra,
    }
    if rules is not None:
        d["rules"] = rules
    return d


def _ext(kind: str, name: str, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "name": name, **extra}


CHAT = {"messages": [{"role": "user", "content": "hi"}]}


def _conv_rule(
    name: str,
    source: str,
    role: str | None = None,
    ftype: str = "count",
    predicate: dict[str, Any] | None = None,
) -> dict[str, Any]:
    src: dict[str, Any] = {"type": source}
    if role is not None:
        src["role"] = role
    rule: dict[str, Any] = {"name": name, "feature": {"type": ftype, "source": src}}
    if predicate is not None:
        rule["predicate"] = predicate
    return rule


class TestConversationRules:
    def test_only_referenced_rules_are_evaluated_and_values_published(self) -> None:
        """Unreferenced rules leave no trace; a referenced rule publishes its value even when it does not match."""
        router = _router(
            [_decision("d", _leaf("conversation", "multi_turn"))],
            conversation=[
                _conv_rule("multi_turn", "message", "user", predicate={"gte": 2}),
                _conv_rule("unused", "tool_definition", predicate={"gte": 1}),
            ],
        )
        result = router.route(CHAT)
        assert result["signals"] == {
            "conversation:multi_turn": {"value": 1.0, "matched": False, "confidence": 0.0}
        }

    def test_reference_type_is_case_insensitive_and_names_exact(self) -> None:
        """A leaf 'Conversation:multi' causes the rule 'multi' to be evaluated (the type is lower-cased); a leaf
        'conversation:MULTI' could never match the rule (names match exactly), so it is a config error."""
        router = _router(
            [_decision("d", _leaf("Conversation", "multi"))],
            conversation=[_conv_rule("multi", "message", "user")],
        )
        assert "conversation:multi" in router.route(CHAT)["signals"]
        with pytest.raises(ConfigError) as refused:
            _router(
                [_decision("d", _leaf("conversation", "MULTI"))],
                conversation=[_conv_rule("multi", "message", "user")],
            )
        assert refused.value.errors == [
            'decision [0] "d": rules: conversation rule "MULTI" is not declared in routing.signals.conversation'
            ' (names match exactly; it declares "multi")'
        ]

    @pytest.mark.parametrize(
        ("predicate", "value", "matched"),
        [
            ({"gt": 2}, 2, False),
            ({"gt": 2}, 3, True),
            ({"gte": 2}, 2, True),
            ({"gte": 2}, 1, False),
            ({"lt": 3}, 3, False),
            ({"lt": 3}, 2, True),
            ({"lte": 3}, 3, True),
            ({"lte": 3}, 4, False),
            ({"gte": 2, "lt": 5}, 5, False),
            ({"gte": 2, "lt": 5}, 4, True),
            ({"gte": 3, "lte": 3}, 3, True),
            ({"gte": 3, "lte": 3}, 2, False),
            (None, 0, True),  # a count rule without predicate matches unconditionally, even at 0
        ],
    )
    def test_predicate_boundaries(self, predicate: dict[str, Any] | None, value: int, matched: bool) -> None:
        """Bounds are compared exactly; all set bounds must hold."""
        router = _router(
            [_decision("d", _leaf("conversation", "tools"))],
            conversation=[_conv_rule("tools", "tool_definition", predicate=predicate)],
        )
        entry = router.route({"messages": [], "tools": [{}] * value})["signals"]["conversation:tools"]
        assert entry == {"value": float(value), "matched": matched, "confidence": 1.0 if matched else 0.0}

    @pytest.mark.parametrize(
        ("role", "expected"),
        [
            ("user", 2),
            ("assistant", 1),
            ("system", 1),
            ("tool", 1),
            ("developer", 1),
            ("non_user", 4),
            ("", 6),
        ],
    )
    def test_role_counts(self, role: str, expected: int) -> None:
        """non_user = assistant + system + tool + developer flag; the empty role counts everything."""
        request = {
            "messages": [
                {"role": "system", "content": "s"},
                {"role": "developer", "content": "d"},
                {"role": "developer", "content": "d"},
                {"role": "user", "content": "u"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "c"}]},
                {"role": "tool", "tool_call_id": "c", "content": "r"},
                {"role": "user", "content": "u"},
            ]
        }
        router = _router(
            [_decision("d", _leaf("conversation", "r"))], conversation=[_conv_rule("r", "message", role)]
        )
        assert router.route(request)["signals"]["conversation:r"]["value"] == expected

    @pytest.mark.parametrize(
        ("source", "request_fields", "value"),
        [
            ("tool_choice_required", {"tool_choice": "required"}, 1.0),
            ("tool_choice_none", {"tool_choice": "none"}, 1.0),
            ("tool_choice_required", {"tool_choice": "auto"}, 0.0),
            (
                "image_content",
                {"messages": [{"role": "user", "content": [{"type": "image_url"}, {"type": "image_url"}]}]},
                1.0,
            ),
            ("active_tool_loop", {"messages": [{"role": "assistant", "tool_calls": [{"id": "x"}]}]}, 1.0),
            ("flow_tool_state", {"messages": [{"role": "tool", "tool_call_id": "flowtool_s__c"}]}, 1.0),
            ("assistant_tool_call", {"messages": [{"role": "assistant", "tool_calls": [{}, {}]}]}, 1.0),
            ("assistant_tool_cycle", {"messages": [{"role": "tool"}]}, 1.0),
        ],
    )
    def test_exists_sources(self, source: str, request_fields: dict[str, Any], value: float) -> None:
        """exists turns any positive raw value into 1.0 and matches on it."""
        router = _router(
            [_decision("d", _leaf("conversation", "r"))],
            conversation=[_conv_rule("r", source, ftype="exists")],
        )
        entry = router.route({"messages": [], **request_fields})["signals"]["conversation:r"]
        assert entry == {"value": value, "matched": value > 0, "confidence": value}


class TestKeywords:
    @pytest.mark.parametrize(
        ("rule", "text", "matched"),
        [
            ({"operator": "OR", "keywords": ["urgent", "asap"]}, "This is URGENT", True),
            ({"operator": "OR", "keywords": ["urgent"]}, "act urgently", False),  # word boundaries
            ({"operator": "OR", "keywords": ["urgent"], "case_sensitive": True}, "URGENT", False),
            ({"operator": "AND", "keywords": ["credit card", "SSN"]}, "my ssn and credit card", True),
            ({"operator": "AND", "keywords": ["credit card", "SSN"]}, "my ssn", False),
            ({"operator": "NOR", "keywords": ["buy now", "free money"]}, "hello", True),
            ({"operator": "NOR", "keywords": ["buy now"]}, "Buy now!", False),
            ({"operator": "OR", "keywords": ["简短"]}, "以后回答简短一些", True),  # Han: no word boundaries
            ({"operator": "OR", "keywords": ["a.b"]}, "axb", False),  # literal, not a regex
        ],
    )
    def test_operators(self, rule: dict[str, Any], text: str, matched: bool) -> None:
        """AND/OR/NOR over literal keywords, case-insensitive unless case_sensitive."""
        router = _router([_decision("d", _leaf("keyword", "k"))], keyword=[{"name": "k", **rule}])
        result = router.route({"messages": [{"role": "user", "content": text}]})
        assert result["signals"]["keyword:k"]["matched"] is matched
        assert (result["decision"] is not None) is matched

    @pytest.mark.parametrize(
        ("keyword", "text", "matched"),
        [
            ("C++", "I write c++ daily", True),
            ("C++", "c++", True),
            ("C++", "C++ rocks", True),
            ("C++", "xc++ is not it", False),  # the word-character edge is still bounded
            ("C#", "we use C# here", True),
            ("C#", "C#9 is out", True),  # a non-word edge is not bounded
            (".NET", "we use .net", True),
            (".NET", "ASP.NET core", True),
            (".NET", "the .network", False),
            ("Answer:", "Answer: 42", True),
            ("Answer:", "Answers: 42", False),
            ("urgent!", "this is urgent!", True),
        ],
    )
    def test_keywords_with_non_word_edges_match(self, keyword: str, text: str, matched: bool) -> None:
        """A keyword that starts or ends with a non-word character (C++, C#, .NET, Answer:) matches (vLLM SR
        #3710: \\b on a non-word edge never matched); its word-character edges keep their boundary."""
        router = _router(
            [_decision("d", _leaf("keyword", "k"))],
            keyword=[{"name": "k", "operator": "OR", "keywords": [keyword]}],
        )
        result = router.route({"messages": [{"role": "user", "content": text}]})
        assert result["signals"]["keyword:k"]["matched"] is matched

    def test_latest_user_message_only(self) -> None:
        """Only the latest user message is searched (parts' text joined)."""
        router = _router(
            [_decision("d", _leaf("keyword", "k"))],
            keyword=[{"name": "k", "operator": "OR", "keywords": ["urgent"]}],
        )
        old = {
            "messages": [
                {"role": "user", "content": "urgent"},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "thanks"},
            ]
        }
        new = {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "it is"}, {"type": "text", "text": "urgent"}],
                }
            ]
        }
        assert router.route(old)["decision"] is None
        assert router.route(new)["decision"] is not None


class TestTrees:
    def _decide(self, rules: dict[str, Any] | None, external: list[dict[str, Any]]) -> dict[str, Any] | None:
        decision: dict[str, Any] | None = _router([_decision("d", rules)]).route(
            CHAT, "openai-chat", external
        )["decision"]
        return decision

    def test_and_mean_confidence_and_rules(self) -> None:
        """AND: all children, confidence = mean, rules concatenated."""
        rules = {"operator": "AND", "conditions": [_leaf("domain", "math"), _leaf("embedding", "calc")]}
        d = self._decide(
            rules, [_ext("domain", "math", confidence=0.6), _ext("embedding", "calc", confidence=0.8)]
        )
        assert d is not None
        assert d["confidence"] == pytest.approx(0.7)
        assert d["matchedRules"] == ["domain:math", "embedding:calc"]
        assert self._decide(rules, [_ext("domain", "math")]) is None

    def test_or_best_child_first_wins_ties_zero_counts(self) -> None:
        """OR returns the single best child; ties go to the first; a zero-confidence match still counts."""
        rules = {"operator": "OR", "conditions": [_leaf("a", "x"), _leaf("b", "y"), _leaf("c", "z")]}
        d = self._decide(
            rules,
            [_ext("a", "x", confidence=0.5), _ext("b", "y", confidence=0.9), _ext("c", "z", confidence=0.9)],
        )
        assert d is not None and d["matchedRules"] == ["b:y"] and d["confidence"] == 0.9
        zero = self._decide(rules, [_ext("a", "x", confidence=0)])
        assert zero is not None and zero["confidence"] == 0.0 and zero["matchedRules"] == ["a:x"]

    def test_unknown_operator_is_or(self) -> None:
        """A typo or empty operator behaves as OR."""
        for operator in ("XOR", "or", ""):
            rules = {"operator": operator, "conditions": [_leaf("a", "x"), _leaf("b", "y")]}
            d = self._decide(rules, [_ext("b", "y")])
            assert d is not None and d["matchedRules"] == ["b:y"]

    def test_not(self) -> None:
        """NOT needs exactly one child; it matches (1.0, no rules) when the child does not."""
        one = {"operator": "NOT", "conditions": [_leaf("a", "x")]}
        assert self._decide(one, []) == {
            "name": "d",
            "confidence": 1.0,
            "matchedRules": [],
            "modelRefs": [{"model": "d-model"}],
        }
        assert self._decide(one, [_ext("a", "x")]) is None
        assert self._decide({"operator": "not", "conditions": []}, []) is None
        assert self._decide({"operator": "NOT", "conditions": [_leaf("a", "x"), _leaf("b", "y")]}, []) is None

    def test_catch_alls(self) -> None:
        """Omitted rules and an empty AND match with confidence 0 and no rules; an empty OR never matches. A
        root with no type, name, operator or conditions is omitted, whatever else it holds (vLLM's IsEmpty)."""
        omitted: list[dict[str, Any] | None] = [
            None,
            {},
            {"conditions": []},
            {"operator": ""},
            {"operator": "", "conditions": [], "label": "x", "on_error": "match"},
        ]
        for rules in [*omitted, {"operator": "AND", "conditions": []}]:
            d = self._decide(rules, [])
            assert d is not None and d["confidence"] == 0.0 and d["matchedRules"] == []
        assert self._decide({"operator": "OR", "conditions": []}, []) is None
        assert self._decide({"name": "x", "conditions": []}, []) is None  # a name: an OR of nothing

    def test_leaf_confidence_and_exact_names(self) -> None:
        """A leaf takes the signal's confidence (0 kept, absent = 1.0); names match exactly; unknown types never."""
        assert self._decide(_leaf("domain", "Math"), [_ext("domain", "math")]) is None
        d = self._decide(_leaf("domain", "math"), [_ext("DOMAIN", "math")])
        assert d is not None and d["confidence"] == 1.0 and d["matchedRules"] == ["domain:math"]
        assert self._decide(_leaf("nonexistent", "x"), []) is None

    def test_predicate_leaves_and_on_error(self) -> None:
        """Predicate leaves compare the value (confidence 1.0); a missing value with an error matches only with on_error: match."""
        leaf = _leaf("complexity", "score", predicate={"gte": 0.5})
        assert (
            self._decide(leaf, [_ext("complexity", "score", value=0.7, confidence=0.2)])["confidence"] == 1.0
        )  # type: ignore[index]
        assert self._decide(leaf, [_ext("complexity", "score", value=0.4)]) is None
        assert self._decide(leaf, [_ext("complexity", "score", error="timeout")]) is None
        on_error = _leaf("complexity", "score", predicate={"gte": 0.5}, on_error="MATCH")
        d = self._decide(on_error, [_ext("complexity", "score", error="timeout")])
        assert d is not None and d["matchedRules"] == ["complexity:score"]
        labeled = _leaf("classifier", "intent", label="billing", predicate={"gt": 0.5})
        assert self._decide(labeled, [_ext("classifier", "intent:billing", value=0.9)]) is not None

    def test_classifier_needs_a_predicate(self) -> None:
        """A classifier leaf without predicate never matches."""
        assert self._decide(_leaf("classifier", "intent"), [_ext("classifier", "intent")]) is None

    def test_external_error_is_not_a_match(self) -> None:
        """An external signal carrying an error counts as not matched."""
        assert self._decide(_leaf("pii", "ssn"), [_ext("pii", "ssn", error="model down")]) is None


class TestSelection:
    def _pick(
        self, decisions: list[dict[str, Any]], external: list[dict[str, Any]], strategy: str = "priority"
    ) -> str | None:
        d = _router(decisions, strategy=strategy).route(CHAT, "openai-chat", external)["decision"]
        return None if d is None else str(d["name"])

    def test_priority_then_confidence_then_name(self) -> None:
        """priority: higher priority; then confidence; then name ascending."""
        ext = [_ext("a", "x", confidence=0.4), _ext("b", "y", confidence=0.9)]
        assert (
            self._pick([_decision("low", _leaf("b", "y"), 1), _decision("high", _leaf("a", "x"), 5)], ext)
            == "high"
        )
        assert (
            self._pick([_decision("p", _leaf("a", "x"), 5), _decision("q", _leaf("b", "y"), 5)], ext) == "q"
        )
        assert (
            self._pick([_decision("zeta", _leaf("a", "x"), 5), _decision("alpha", _leaf("a", "x"), 5)], ext)
            == "alpha"
        )

    def test_confidence_strategy(self) -> None:
        """confidence: higher confidence first, then priority, then name."""
        ext = [_ext("a", "x", confidence=0.4), _ext("b", "y", confidence=0.9)]
        decisions = [_decision("high", _leaf("a", "x"), 5), _decision("sure", _leaf("b", "y"), 1)]
        assert self._pick(decisions, ext, "confidence") == "sure"
        tie = [
            _decision("b", _leaf("a", "x"), 1),
            _decision("a", _leaf("a", "x"), 1),
            _decision("c", _leaf("a", "x"), 2),
        ]
        assert self._pick(tie, ext, "confidence") == "c"

    def test_tiers(self) -> None:
        """With any tiered match: tier ascending (untiered 0 first), then confidence, priority, name; strategy ignored."""
        ext = [_ext("a", "x", confidence=0.4), _ext("b", "y", confidence=0.9)]
        tiered = [
            _decision("t2", _leaf("b", "y"), 100, tier=2),
            _decision("t1", _leaf("a", "x"), 1, tier=1),
        ]
        assert self._pick(tiered, ext) == "t1"
        assert self._pick([*tiered, _decision("untiered", _leaf("a", "x"), 0)], ext) == "untiered"
        same_tier = [
            _decision("t1a", _leaf("a", "x"), 50, tier=1),
            _decision("t1b", _leaf("b", "y"), 1, tier=1),
        ]
        assert self._pick(same_tier, ext, "priority") == "t1b"


class TestModel:
    def test_model_choice(self) -> None:
        """auto/absent → the decision's first modelRef; explicit kept; no modelRefs or no match → default_model."""
        router = _router(
            [
                {
                    "name": "agentic",
                    "priority": 10,
                    "rules": _leaf("a", "x"),
                    "modelRefs": [{"model": "gpt-4o"}, {"model": "b"}],
                },
                {"name": "bare", "priority": 5, "rules": _leaf("b", "y")},
            ]
        )
        assert router.route({**CHAT, "model": "auto"}, "openai-chat", [_ext("a", "x")])["model"] == "gpt-4o"
        assert router.route(CHAT, "openai-chat", [_ext("a", "x")])["model"] == "gpt-4o"
        kept = router.route({**CHAT, "model": "my-model"}, "openai-chat", [_ext("a", "x")])
        assert kept["model"] == "my-model" and kept["decision"]["name"] == "agentic"
        assert router.route(CHAT, "openai-chat", [_ext("b", "y")])["model"] == "default-model"
        none = router.route(CHAT)
        assert none["decision"] is None and none["model"] == "default-model"
        assert router.route({**CHAT, "model": "mine"})["model"] == "mine"

    def test_no_decisions(self) -> None:
        """Routing with no decisions configured is an error with the reference's words."""
        with pytest.raises(NoDecisionsConfigured, match="no decisions configured"):
            _router([]).route(CHAT)


def test_reference_yaml_example() -> None:
    """The reference's §3.6 example: agentic routing for a tool-heavy loop, vision first, fallback otherwise."""
    from pathlib import Path

    from policies.routing import load_router

    router = load_router(Path(__file__).parent / "reference_example.yaml")
    tools = [{"type": "function"}] * 3
    loop = {
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "tool_calls": [{"id": "c"}]},
            {"role": "tool", "tool_call_id": "c"},
        ],
        "tools": tools,
    }
    assert router.route(loop)["decision"]["name"] == "agentic_routing"
    flow = {**loop, "messages": [*loop["messages"][:2], {"role": "tool", "tool_call_id": "flowtool_s1__c"}]}
    assert router.route(flow)["decision"]["name"] == "fallback"
    vision = {
        "messages": [{"role": "user", "content": [{"type": "image_url"}]}],
        "tools": tools,
        "tool_choice": "required",
    }
    result = router.route(vision)
    assert result["decision"]["name"] == "vision-request" and result["model"] == "vision-model"
    fallback = router.route({"messages": [{"role": "user", "content": "2+2?"}]})
    assert fallback["decision"] == {
        "name": "fallback",
        "confidence": 0.0,
        "matchedRules": [],
        "modelRefs": [{"model": "small-model"}],
    }
