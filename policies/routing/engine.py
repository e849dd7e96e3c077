"""Signals → decision → model (vLLM Semantic Router's conversation family and decision engine).

``Router(config).route(request, protocol, external_signals)`` is a pure function of its arguments: it
extracts the facts, evaluates the conversation and keyword rules that some decision references (values are
published even when a rule does not match), folds in externally supplied signals, evaluates every decision's
rule tree and picks one:

* leaf: with a ``predicate``, the signal's *value* must satisfy it (confidence 1.0; NaN/±Inf never match),
  or, when the value is missing and the signal reported an error, ``on_error: match`` matches; without a
  predicate, the name must be among the matched names of its type (confidence from the signal, 1.0 when
  absent). ``classifier`` leaves only work with a predicate. Unknown types never match.
* ``AND``: all children, confidence = mean, rules concatenated; empty AND = catch-all with confidence 0.
  ``NOT``: exactly one child, matches (confidence 1.0, no rules) when the child does not. Any other operator
  is ``OR``: the best child (first wins ties); empty OR never matches. An omitted/empty root always matches
  with confidence 0.
* selection (stable): if any matched decision has ``tier > 0``: tier ascending, confidence desc, priority
  desc, name asc (strategy ignored; untiered 0 sorts first). Else ``confidence``: confidence, priority, name;
  else ``priority``: priority, confidence, name.
* model: a request whose ``model`` is absent or ``"auto"`` gets the decision's first modelRef, or
  ``providers.defaults.default_model`` when the decision has none or nothing matched; any other model is kept.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from policies.routing.config import ConversationRule, Decision, KeywordRule, RouterConfig, RuleNode
from policies.routing.facts import Facts, extract_facts

__all__ = ["NoDecisionsConfigured", "Router", "latest_user_text"]

Match = tuple[bool, float, list[str]]
NO_MATCH: Match = (False, 0.0, [])


class NoDecisionsConfigured(ValueError):
    """The config has no decisions (vLLM Semantic Router: "no decisions configured")."""

    def __init__(self) -> None:
        super().__init__("no decisions configured")


def _has_word_char_and_no_han(keyword: str) -> bool:
    word = any(ch.isalnum() or ch == "_" for ch in keyword)
    han = any("CJK UNIFIED IDEOGRAPH" in unicodedata.name(ch, "") for ch in keyword)
    return word and not han


def _compile_keyword(keyword: str, case_sensitive: bool) -> re.Pattern[str]:
    """The keyword as a literal, with word boundaries when it has a word character and no Han character."""
    pattern = re.escape(keyword)
    if _has_word_char_and_no_han(keyword):
        pattern = rf"\b{pattern}\b"
    return re.compile(pattern, 0 if case_sensitive else re.IGNORECASE)


def _text_of(content: Any, text_types: tuple[str, ...]) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            p["text"]
            for p in content
            if isinstance(p, Mapping) and p.get("type") in text_types and isinstance(p.get("text"), str)
        )
    return ""


def latest_user_text(request: Mapping[str, Any], protocol: str) -> str:
    """The text of the latest user message (what keyword rules match against)."""
    if protocol == "openai-responses":
        items = request.get("input")
        if isinstance(items, str):
            return items
        for item in reversed(items if isinstance(items, list) else []):
            if isinstance(item, Mapping) and item.get("role") == "user":
                return _text_of(item.get("content"), ("input_text", "text"))
        return ""
    messages = request.get("messages")
    for message in reversed(messages if isinstance(messages, list) else []):
        if isinstance(message, Mapping) and message.get("role") == "user":
            return _text_of(message.get("content"), ("text", "input_text"))
    return ""


def _leaves(node: RuleNode) -> Iterable[RuleNode]:
    if node.is_leaf:
        yield node
    for child in node.conditions:
        yield from _leaves(child)


def _zero(_: Facts) -> int:
    return 0


def _developer(f: Facts) -> int:
    return 1 if f.has_developer_message else 0


# Role counts of ``source.type: message`` (``non_user`` = assistant + system + tool + developer flag; the
# empty role = every role), and the other sources' raw values.
_ROLE_COUNTS: dict[str, Callable[[Facts], int]] = {
    "user": lambda f: f.user_message_count,
    "assistant": lambda f: f.assistant_message_count,
    "system": lambda f: f.system_message_count,
    "tool": lambda f: f.tool_message_count,
    "developer": _developer,
    "non_user": lambda f: (
        f.assistant_message_count + f.system_message_count + f.tool_message_count + _developer(f)
    ),
    "": lambda f: (
        f.user_message_count
        + f.assistant_message_count
        + f.system_message_count
        + f.tool_message_count
        + _developer(f)
    ),
}
_SOURCE_VALUES: dict[str, Callable[[Facts], int]] = {
    "tool_definition": lambda f: f.tool_definition_count,
    "tool_choice_required": lambda f: 1 if f.tool_choice_required else 0,
    "tool_choice_none": lambda f: 1 if f.tool_choice_none else 0,
    "assistant_tool_call": lambda f: f.assistant_tool_call_count,
    "assistant_tool_cycle": lambda f: f.tool_result_count,
    "active_tool_loop": lambda f: 1 if f.active_tool_loop else 0,
    "flow_tool_state": lambda f: 1 if f.last_message_flow_tool_result else 0,
    "image_content": lambda f: f.image_content_count,
}


class _Signals:
    """SignalMatches: matched names per type, confidences, values, errors (keys ``type:name``)."""

    __slots__ = ("confidences", "errors", "matched", "values")

    def __init__(self) -> None:
        self.matched: dict[str, set[str]] = {}
        self.confidences: dict[str, float] = {}
        self.values: dict[str, float] = {}
        self.errors: set[str] = set()


def _compile_leaf(node: RuleNode) -> Callable[[_Signals], Match]:
    kind = node.type.strip().lower()
    key = f"{kind}:{node.name}"
    value_key = key + (f":{node.label}" if node.label else "")
    label = [f"{node.type}:{node.name}" + (f":{node.label}" if node.label else "")]
    hit: Match = (True, 1.0, label)
    name = node.name
    predicate = node.predicate
    on_error_match = node.on_error.lower() == "match"
    if predicate is not None:

        def leaf_with_predicate(sig: _Signals) -> Match:
            value = sig.values.get(value_key)
            if value is not None:
                return hit if predicate.holds(value) else NO_MATCH
            if on_error_match and key in sig.errors:
                return hit
            return NO_MATCH

        return leaf_with_predicate
    if kind == "classifier":
        return lambda sig: NO_MATCH

    def leaf(sig: _Signals) -> Match:
        names = sig.matched.get(kind)
        if names is not None and name in names:
            return True, sig.confidences.get(key, 1.0), label
        return NO_MATCH

    return leaf


def _compile_operator(
    operator: str, children: tuple[Callable[[_Signals], Match], ...]
) -> Callable[[_Signals], Match]:
    if operator == "AND":
        if not children:
            return lambda sig: (True, 0.0, [])
        count = len(children)

        def all_of(sig: _Signals) -> Match:
            total = 0.0
            rules: list[str] = []
            for child in children:
                matched, confidence, child_rules = child(sig)
                if not matched:
                    return NO_MATCH
                total += confidence
                rules += child_rules
            return True, total / count, rules

        return all_of
    if operator == "NOT":
        if len(children) != 1:
            return lambda sig: NO_MATCH
        only = children[0]
        return lambda sig: NO_MATCH if only(sig)[0] else (True, 1.0, [])

    def best_of(sig: _Signals) -> Match:  # OR, and any unknown operator
        best: Match | None = None
        for child in children:
            result = child(sig)
            if result[0] and (best is None or result[1] > best[1]):
                best = result
        return best or NO_MATCH

    return best_of


class Router:
    """A compiled configuration; ``route`` may be called concurrently (no mutable state)."""

    def __init__(self, config: RouterConfig) -> None:
        self.config = config
        used = {
            f"{leaf.type.strip().lower()}:{leaf.name}".lower()
            for d in config.decisions
            for leaf in _leaves(d.rules)
        }
        self._conversation: tuple[ConversationRule, ...] = tuple(
            r for r in config.conversation if f"conversation:{r.name}".lower() in used
        )
        self._conversation_plan = tuple(
            (
                r.name,
                f"conversation:{r.name}",
                _ROLE_COUNTS.get(r.role, _zero)
                if r.source_type == "message"
                else _SOURCE_VALUES.get(r.source_type, _zero),
                r.feature_type == "exists",
                r.predicate,
            )
            for r in self._conversation
        )
        self._keywords: tuple[tuple[KeywordRule, tuple[re.Pattern[str], ...]], ...] = tuple(
            (r, tuple(_compile_keyword(k, r.case_sensitive) for k in r.keywords))
            for r in config.keyword
            if f"keyword:{r.name}".lower() in used
        )
        compiled = [
            (d, (lambda sig: (True, 0.0, [])) if d.rules.empty else self._compile(d.rules))
            for d in config.decisions
        ]
        # Under the priority strategy with no tiers configured, a decision can only win against others of
        # its own priority, so decisions are evaluated in priority groups, highest first, stopping at the
        # first group with a match. Otherwise every decision is evaluated (one group).
        self._stop_at_first_group = config.strategy == "priority" and not any(
            d.tier > 0 for d in config.decisions
        )
        if self._stop_at_first_group:
            priorities = sorted({d.priority for d in config.decisions}, reverse=True)
            self._groups = [[c for c in compiled if c[0].priority == p] for p in priorities]
        else:
            self._groups = [compiled]

    # ---- signals ------------------------------------------------------------------------------------

    @staticmethod
    def conversation_raw(rule: ConversationRule, f: Facts) -> int:
        """The rule's raw number before ``exists`` turns it into 0/1."""
        if rule.source_type == "message":
            return _ROLE_COUNTS.get(rule.role, _zero)(f)
        return _SOURCE_VALUES.get(rule.source_type, _zero)(f)

    def _evaluate_signals(
        self, facts: Facts, text: str, external: Sequence[Mapping[str, Any]]
    ) -> tuple[_Signals, dict[str, dict[str, Any]]]:
        sig = _Signals()
        published: dict[str, dict[str, Any]] = {}
        conv = sig.matched.setdefault("conversation", set())
        values, confidences = sig.values, sig.confidences
        for name, key, raw_of, exists, predicate in self._conversation_plan:
            raw = raw_of(facts)
            if exists:
                value = 1.0 if raw > 0 else 0.0
                matched = raw > 0
            else:
                value = float(raw)
                matched = predicate is None or predicate.holds(value)
            confidence = 1.0 if matched else 0.0
            values[key] = value
            confidences[key] = confidence
            if matched:
                conv.add(name)
            published[key] = {"value": value, "matched": matched, "confidence": confidence}
        kw = sig.matched.setdefault("keyword", set())
        for keyword_rule, patterns in self._keywords:
            hits = [p.search(text) is not None for p in patterns]
            if keyword_rule.operator == "AND":
                matched = all(hits)
            elif keyword_rule.operator == "OR":
                matched = any(hits)
            else:  # NOR
                matched = not any(hits)
            key = f"keyword:{keyword_rule.name}"
            sig.confidences[key] = 1.0 if matched else 0.0
            sig.values[key] = 1.0 if matched else 0.0
            if matched:
                kw.add(keyword_rule.name)
            published[key] = {
                "value": 1.0 if matched else 0.0,
                "matched": matched,
                "confidence": 1.0 if matched else 0.0,
            }
        for item in external:
            kind = str(item["type"]).strip().lower()
            name = str(item["name"])
            key = f"{kind}:{name}"
            entry: dict[str, Any] = {}
            if item.get("error"):
                sig.errors.add(key)
                entry = {"matched": False, "confidence": 0.0, "error": str(item["error"])}
            else:
                confidence = float(item["confidence"]) if item.get("confidence") is not None else 1.0
                sig.matched.setdefault(kind, set()).add(name)
                sig.confidences[key] = confidence
                entry = {"matched": True, "confidence": confidence}
            if item.get("value") is not None:
                sig.values[key] = float(item["value"])
                entry["value"] = float(item["value"])
            published[f"{item['type']}:{name}"] = entry
        return sig, published

    # ---- decisions ----------------------------------------------------------------------------------

    @staticmethod
    def _compile(node: RuleNode) -> Callable[[_Signals], Match]:
        """Turn a rule tree into nested closures (evaluated per request; compiled once per config)."""
        if node.is_leaf:
            return _compile_leaf(node)
        return _compile_operator(
            node.operator.strip().upper(), tuple(Router._compile(c) for c in node.conditions)
        )

    def _decide(self, sig: _Signals) -> tuple[Decision, Match] | None:
        matched: list[tuple[Decision, Match]] = []
        for group in self._groups:
            for decision, evaluate in group:
                result = evaluate(sig)
                if result[0]:
                    matched.append((decision, result))
            if matched and self._stop_at_first_group:
                break  # lower-priority groups cannot win under the priority strategy without tiers
        if not matched:
            return None
        if any(d.tier > 0 for d, _ in matched):
            matched.sort(key=lambda m: (m[0].tier, -m[1][1], -m[0].priority, m[0].name))
        elif self.config.strategy == "confidence":
            matched.sort(key=lambda m: (-m[1][1], -m[0].priority, m[0].name))
        else:
            matched.sort(key=lambda m: (-m[0].priority, -m[1][1], m[0].name))
        return matched[0]

    # ---- the whole thing ------------------------------------------------------------------------------

    def route(
        self,
        request: Mapping[str, Any],
        protocol: str = "openai-chat",
        external_signals: Sequence[Mapping[str, Any]] = (),
    ) -> dict[str, Any]:
        """The RouteResult for one request."""
        if not self.config.decisions:
            raise NoDecisionsConfigured()
        facts = extract_facts(request, protocol)
        text = latest_user_text(request, protocol) if self._keywords else ""
        sig, published = self._evaluate_signals(facts, text, external_signals)
        chosen = self._decide(sig)
        requested = request.get("model")
        auto = requested is None or requested == "auto"
        decision_json = None
        model = self.config.default_model if auto else requested
        if chosen is not None:
            decision, (_, confidence, rules) = chosen
            decision_json = {
                "name": decision.name,
                "confidence": confidence,
                "matchedRules": rules,
                "modelRefs": [dict(r) for r in decision.model_refs],
            }
            if auto:
                model = decision.model_refs[0]["model"] if decision.model_refs else self.config.default_model
        return {
            "facts": facts.to_json_dict(),
            "signals": published,
            "decision": decision_json,
            "model": model,
        }
