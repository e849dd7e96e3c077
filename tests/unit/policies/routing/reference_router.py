"""A straightforward reference evaluation of a router config, for checking the compiled router against.

Written from the documented semantics (``policies/routing/engine.py``'s docstring, the reference §3.4-3.5)
with none of the compiled router's shortcuts: every referenced rule is evaluated with
:meth:`Predicate.holds`, every keyword with its regex, every decision's tree fully (no short-circuit, no
priority groups, no table, no fast path), and all matches are sorted. The facts come from
:func:`extract_facts`, whose behaviour ``test_facts.py`` pins; the keyword text is looked up here.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from policies.routing import Facts, NoDecisionsConfigured, RouterConfig, extract_facts
from policies.routing.config import ConversationRule, Decision, RuleNode

Match = tuple[bool, float, list[str]]


class State:
    def __init__(self) -> None:
        self.matched: dict[str, set[str]] = {}
        self.confidences: dict[str, float] = {}
        self.values: dict[str, float] = {}
        self.errors: set[str] = set()


def _leaves(node: RuleNode) -> Iterator[RuleNode]:
    if node.is_leaf:
        yield node
    for child in node.conditions:
        yield from _leaves(child)


def raw_value(rule: ConversationRule, f: Facts) -> int:
    developer = 1 if f.has_developer_message else 0
    non_user = f.assistant_message_count + f.system_message_count + f.tool_message_count + developer
    if rule.source_type == "message":
        return {
            "user": f.user_message_count,
            "assistant": f.assistant_message_count,
            "system": f.system_message_count,
            "tool": f.tool_message_count,
            "developer": developer,
            "non_user": non_user,
            "": f.user_message_count + non_user,
        }.get(rule.role, 0)
    return {
        "tool_definition": f.tool_definition_count,
        "tool_choice_required": int(f.tool_choice_required),
        "tool_choice_none": int(f.tool_choice_none),
        "assistant_tool_call": f.assistant_tool_call_count,
        "assistant_tool_cycle": f.tool_result_count,
        "active_tool_loop": int(f.active_tool_loop),
        "flow_tool_state": int(f.last_message_flow_tool_result),
        "image_content": f.image_content_count,
    }.get(rule.source_type, 0)


def _text(content: Any, types: tuple[str, ...]) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p for p in content if isinstance(p, Mapping)]
        return " ".join(p["text"] for p in parts if p.get("type") in types and isinstance(p.get("text"), str))
    return ""


def latest_user_text(request: Mapping[str, Any], protocol: str) -> str:
    if protocol == "openai-responses":
        items = request.get("input")
        if isinstance(items, str):
            return items
        users = [i for i in (items if isinstance(items, list) else []) if isinstance(i, Mapping)]
        users = [i for i in users if i.get("role") == "user"]
        return _text(users[-1].get("content"), ("input_text", "text")) if users else ""
    messages = request.get("messages")
    found = [m for m in (messages if isinstance(messages, list) else []) if isinstance(m, Mapping)]
    found = [m for m in found if m.get("role") == "user"]
    return _text(found[-1].get("content"), ("text", "input_text")) if found else ""


def keyword_hit(keyword: str, case_sensitive: bool, text: str) -> bool:
    """A literal; with a word character and no Han one, each edge that is a word character may not touch
    another word character (an edge such as ``+`` in ``C++`` is not bounded)."""
    word = any(ch.isalnum() or ch == "_" for ch in keyword)
    han = any("CJK UNIFIED IDEOGRAPH" in unicodedata.name(ch, "") for ch in keyword)
    pattern = re.escape(keyword)
    if word and not han:
        before = r"(?<!\w)" if re.match(r"\w", keyword[0]) else ""
        after = r"(?!\w)" if re.match(r"\w", keyword[-1]) else ""
        pattern = before + pattern + after
    return re.search(pattern, text, 0 if case_sensitive else re.IGNORECASE) is not None


def _publish(state: State, published: dict[str, Any], kind: str, name: str, value: float, hit: bool) -> None:
    key = f"{kind}:{name}"
    state.values[key] = value
    state.confidences[key] = 1.0 if hit else 0.0
    state.matched.setdefault(kind, set())
    if hit:
        state.matched[kind].add(name)
    published[key] = {"value": value, "matched": hit, "confidence": 1.0 if hit else 0.0}


def signals(
    config: RouterConfig, facts: Facts, text: str, external: Sequence[Mapping[str, Any]]
) -> tuple[State, dict[str, Any]]:
    used = {
        f"{leaf.type.strip().lower()}:{leaf.name}".lower()
        for d in config.decisions
        for leaf in _leaves(d.rules)
    }
    state = State()
    published: dict[str, Any] = {}
    for rule in config.conversation:
        if f"conversation:{rule.name}".lower() in used:
            raw = raw_value(rule, facts)
            if rule.feature_type == "exists":
                _publish(state, published, "conversation", rule.name, 1.0 if raw > 0 else 0.0, raw > 0)
            else:
                hit = rule.predicate is None or rule.predicate.holds(float(raw))
                _publish(state, published, "conversation", rule.name, float(raw), hit)
    for kw in config.keyword:
        if f"keyword:{kw.name}".lower() in used:
            hits = [keyword_hit(k, kw.case_sensitive, text) for k in kw.keywords]
            hit = all(hits) if kw.operator == "AND" else any(hits) if kw.operator == "OR" else not any(hits)
            _publish(state, published, "keyword", kw.name, 1.0 if hit else 0.0, hit)
    for item in external:
        kind, name = str(item["type"]).strip().lower(), str(item["name"])
        key = f"{kind}:{name}"
        entry: dict[str, Any]
        if item.get("error"):
            state.errors.add(key)
            entry = {"matched": False, "confidence": 0.0, "error": str(item["error"])}
        else:
            confidence = 1.0 if item.get("confidence") is None else float(item["confidence"])
            state.matched.setdefault(kind, set()).add(name)
            state.confidences[key] = confidence
            entry = {"matched": True, "confidence": confidence}
        if item.get("value") is not None:
            state.values[key] = entry["value"] = float(item["value"])
        published[key] = entry
    return state, published


def evaluate(node: RuleNode, state: State) -> Match:
    """Every child is evaluated, whatever the earlier ones gave."""
    if node.is_leaf:
        kind = node.type.strip().lower()
        key = f"{kind}:{node.name}"
        label = f"{node.type}:{node.name}" + (f":{node.label}" if node.label else "")
        if node.predicate is not None:
            value = state.values.get(key + (f":{node.label}" if node.label else ""))
            if value is not None:
                return (True, 1.0, [label]) if node.predicate.holds(value) else (False, 0.0, [])
            on_error = node.on_error.lower() == "match" and key in state.errors
            return (True, 1.0, [label]) if on_error else (False, 0.0, [])
        if kind != "classifier" and node.name in state.matched.get(kind, set()):
            return True, state.confidences.get(key, 1.0), [label]
        return False, 0.0, []
    results = [evaluate(c, state) for c in node.conditions]
    operator = node.operator.strip().upper()
    if operator == "AND":
        if not all(r[0] for r in results):
            return False, 0.0, []
        mean = sum(r[1] for r in results) / len(results) if results else 0.0
        return True, mean, [rule for r in results for rule in r[2]]
    if operator == "NOT":
        return (True, 1.0, []) if len(results) == 1 and not results[0][0] else (False, 0.0, [])
    best: Match = (False, 0.0, [])
    for r in results:
        if r[0] and (not best[0] or r[1] > best[1]):
            best = r
    return best


def decide(config: RouterConfig, state: State) -> tuple[Decision, Match] | None:
    matched = [(d, (True, 0.0, []) if d.rules.empty else evaluate(d.rules, state)) for d in config.decisions]
    found = [(d, m) for d, m in matched if m[0]]
    if not found:
        return None
    if any(d.tier > 0 for d, _ in found):
        found.sort(key=lambda x: (x[0].tier, -x[1][1], -x[0].priority, x[0].name))
    elif config.strategy == "confidence":
        found.sort(key=lambda x: (-x[1][1], -x[0].priority, x[0].name))
    else:
        found.sort(key=lambda x: (-x[0].priority, -x[1][1], x[0].name))
    return found[0]


def route(
    config: RouterConfig,
    request: Mapping[str, Any],
    protocol: str = "openai-chat",
    external: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    if not config.decisions:
        raise NoDecisionsConfigured()
    facts = extract_facts(request, protocol)
    state, published = signals(config, facts, latest_user_text(request, protocol), external)
    chosen = decide(config, state)
    requested = request.get("model")
    auto = requested is None or requested == "auto"
    model = config.default_model if auto else requested
    decision = None
    if chosen is not None:
        d, (_, confidence, rules) = chosen
        decision = {
            "name": d.name,
            "confidence": confidence,
            "matchedRules": rules,
            "modelRefs": [dict(r) for r in d.model_refs],
        }
        if auto:
            model = d.model_refs[0]["model"] if d.model_refs else config.default_model
    return {"facts": facts.to_json_dict(), "signals": published, "decision": decision, "model": model}
