"""The signal half of a compiled router: conversation and keyword rules turned into a flat plan, once per
config, and evaluated per request into a :class:`SignalState` (what decision leaves read) plus the
published ``signals`` object of the RouteResult.

Compiled once:

* a conversation rule becomes ``(key, bit, raw_of, exists, gte, gt, lte, lt)``: ``raw_of`` reads one fact (a
  C-level attribute getter for plain facts, a small function only for derived ones such as ``non_user``),
  and the predicate becomes four float bounds (``value >= gte``, ``value > gt``, ``value <= lte``,
  ``value < lt``, unset ones infinite; ``exists`` is ``gt 0``). Facts are integers, so the NaN/infinity
  rule of :meth:`Predicate.holds` never applies.
* a keyword becomes its regex plus a necessary-condition substring: the literal itself when case-sensitive,
  its lower-cased form when the keyword and the text are both ASCII (there ``re.IGNORECASE`` is exactly ASCII
  case folding), else none. The regex runs only when the substring is present, so a message without any
  keyword costs one ``in`` per keyword.

Only rules that some decision references are compiled (unreferenced ones leave no trace). A request's
internal matches are one integer, the *matched mask*; the state decision leaves read is built from it only
when needed (external signals, or no precomputed answer), internal matches record no confidence (leaves
default to 1.0, which is what a matched rule has), and values are recorded only when some decision leaf has
a predicate that could read them.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from operator import attrgetter
from typing import Any

from policies.routing.config import ConversationRule, KeywordRule, Predicate
from policies.routing.facts import Facts

__all__ = [
    "ROLE_COUNTS",
    "SOURCE_VALUES",
    "SignalPlan",
    "SignalState",
    "compile_keyword",
    "merge_external",
    "raw_of",
]


class SignalState:
    """SignalMatches: matched names per type, confidences, values, errors (keys ``type:name``)."""

    __slots__ = ("confidences", "errors", "matched", "values")

    def __init__(self, matched: dict[str, set[str]], values: dict[str, float]) -> None:
        self.matched = matched
        self.confidences: dict[str, float] = {}
        self.values = values
        self.errors: set[str] = set()


def _developer(f: Facts) -> int:
    return 1 if f.has_developer_message else 0


def _non_user(f: Facts) -> int:
    return f.assistant_message_count + f.system_message_count + f.tool_message_count + _developer(f)


def _every_role(f: Facts) -> int:
    return f.user_message_count + _non_user(f)


def _active_tool_loop(f: Facts) -> bool:
    return f.active_tool_loop


def _zero(_: Facts) -> int:
    return 0


# Role counts of ``source.type: message`` (``non_user`` = assistant + system + tool + developer flag; the
# empty role = every role), and the other sources' raw values (booleans count as 0/1).
ROLE_COUNTS: dict[str, Callable[[Facts], int]] = {
    "user": attrgetter("user_message_count"),
    "assistant": attrgetter("assistant_message_count"),
    "system": attrgetter("system_message_count"),
    "tool": attrgetter("tool_message_count"),
    "developer": attrgetter("has_developer_message"),
    "non_user": _non_user,
    "": _every_role,
}
SOURCE_VALUES: dict[str, Callable[[Facts], int]] = {
    "tool_definition": attrgetter("tool_definition_count"),
    "tool_choice_required": attrgetter("tool_choice_required"),
    "tool_choice_none": attrgetter("tool_choice_none"),
    "assistant_tool_call": attrgetter("assistant_tool_call_count"),
    "assistant_tool_cycle": attrgetter("tool_result_count"),
    "active_tool_loop": _active_tool_loop,
    "flow_tool_state": attrgetter("last_message_flow_tool_result"),
    "image_content": attrgetter("image_content_count"),
}


def raw_of(rule: ConversationRule) -> Callable[[Facts], int]:
    """The function giving the rule's raw number (before ``exists`` turns it into 0/1)."""
    if rule.source_type == "message":
        return ROLE_COUNTS.get(rule.role, _zero)
    return SOURCE_VALUES.get(rule.source_type, _zero)


def _bounds(rule: ConversationRule) -> tuple[float, float, float, float]:
    """(gte, gt, lte, lt) that the rule's value must satisfy, unset bounds infinite. An ``exists`` rule's
    value is 1.0 or 0.0 and it matches on 1.0 (gt 0); validation gives it no predicate of its own."""
    if rule.feature_type == "exists":
        return -math.inf, 0.0, math.inf, math.inf
    predicate = rule.predicate or Predicate()

    def bound(value: float | None, unset: float) -> float:
        return unset if value is None else value

    return (
        bound(predicate.gte, -math.inf),
        bound(predicate.gt, -math.inf),
        bound(predicate.lte, math.inf),
        bound(predicate.lt, math.inf),
    )


def _has_word_char_and_no_han(keyword: str) -> bool:
    word = any(ch.isalnum() or ch == "_" for ch in keyword)
    han = any("CJK UNIFIED IDEOGRAPH" in unicodedata.name(ch, "") for ch in keyword)
    return word and not han


_WORD_CHAR = re.compile(r"\w")


def compile_keyword(keyword: str, case_sensitive: bool) -> re.Pattern[str]:
    """The keyword as a literal, bounded when it has a word character and no Han character: an edge that is a
    word character may not touch another one (``(?<!\\w)`` before, ``(?!\\w)`` after); an edge that is not
    (``C++``, ``.NET``, ``Answer:``) gets no boundary, which ``\\b`` would demand of it against a space and
    then never match (vLLM Semantic Router issue #3710)."""
    pattern = re.escape(keyword)
    if _has_word_char_and_no_han(keyword):
        if _WORD_CHAR.match(keyword[0]):
            pattern = r"(?<!\w)" + pattern
        if _WORD_CHAR.match(keyword[-1]):
            pattern += r"(?!\w)"
    return re.compile(pattern, 0 if case_sensitive else re.IGNORECASE)


Keyword = tuple[str, bool, re.Pattern[str]]


def _keyword(keyword: str, case_sensitive: bool) -> Keyword:
    """(needle, needle is lower-cased, pattern): the regex can only match where the needle occurs, in the
    text, or in its lower-cased form when the text is ASCII; an empty needle occurs everywhere."""
    if case_sensitive:
        return keyword, False, compile_keyword(keyword, True)
    if keyword.isascii():
        return keyword.lower(), True, compile_keyword(keyword, False)
    return "", False, compile_keyword(keyword, False)


def _hits(keywords: tuple[Keyword, ...], text: str, lowered: str | None, want_all: bool) -> bool:
    """All keywords hit (``want_all``), or any does; stops at the first one that decides."""
    for needle, in_lowered, pattern in keywords:
        haystack = lowered if in_lowered else text
        hit = (haystack is None or needle in haystack) and pattern.search(text) is not None
        if hit is not want_all:
            return hit
    return want_all


class SignalPlan:
    """The referenced conversation and keyword rules of a config, compiled (see the module docstring).

    Each of the ``rule_count`` rules owns one bit of the *matched mask* (conversation rules first, in config
    order, then keyword rules); :meth:`state` turns a mask back into the state decision leaves read."""

    def __init__(
        self,
        conversation: Sequence[ConversationRule],
        keyword: Sequence[KeywordRule],
        *,
        record_values: bool,
    ) -> None:
        self.conversation = tuple(
            (f"conversation:{r.name}", 1 << i, raw_of(r), r.feature_type == "exists", *_bounds(r))
            for i, r in enumerate(conversation)
        )
        first = len(conversation)
        self.keyword = tuple(
            (
                f"keyword:{r.name}",
                1 << (first + j),
                r.operator == "AND",
                r.operator == "NOR",
                tuple(_keyword(k, r.case_sensitive) for k in r.keywords),
            )
            for j, r in enumerate(keyword)
        )
        self.rule_count = len(conversation) + len(keyword)
        self._conversation_bits = tuple((1 << i, r.name) for i, r in enumerate(conversation))
        self._keyword_bits = tuple((1 << (first + j), r.name) for j, r in enumerate(keyword))
        self.record_values = record_values

    def evaluate(self, facts: Facts, text: str) -> tuple[dict[str, dict[str, Any]], int, dict[str, float]]:
        """(published signals, matched mask, values; values only when ``record_values``)."""
        published: dict[str, dict[str, Any]] = {}
        values: dict[str, float] = {}
        record = self.record_values
        mask = 0
        for key, bit, raw_of_facts, exists, gte, gt, lte, lt in self.conversation:
            raw = raw_of_facts(facts)
            value = (1.0 if raw > 0 else 0.0) if exists else float(raw)
            if value >= gte and value > gt and value <= lte and value < lt:
                mask |= bit
                published[key] = {"value": value, "matched": True, "confidence": 1.0}
            else:
                published[key] = {"value": value, "matched": False, "confidence": 0.0}
            if record:
                values[key] = value
        if self.keyword:
            lowered = text.lower() if text.isascii() else None
            for key, bit, want_all, negate, keywords in self.keyword:
                matched = _hits(keywords, text, lowered, want_all) is not negate
                value = 1.0 if matched else 0.0
                if matched:
                    mask |= bit
                published[key] = {"value": value, "matched": matched, "confidence": value}
                if record:
                    values[key] = value
        return published, mask, values

    def state(self, mask: int, values: dict[str, float]) -> SignalState:
        """The signal state of a matched mask (internal matches need no confidence: leaves default to 1.0)."""
        conversation = {name for bit, name in self._conversation_bits if mask & bit}
        keyword = {name for bit, name in self._keyword_bits if mask & bit}
        return SignalState({"conversation": conversation, "keyword": keyword}, values)


def merge_external(
    sig: SignalState, published: dict[str, dict[str, Any]], external: Sequence[Mapping[str, Any]]
) -> None:
    """External signals count as matched unless they carry ``error``. Each is published under the key leaves
    match it by (``type`` trimmed and lower-cased, ``name`` as given). The door refuses two entries of one key
    (:func:`~policies.routing.envelope.validate_route_input`); a library caller's later entry replaces the
    earlier one entirely, in what decides as in what is published."""
    for item in external:
        kind = str(item["type"]).strip().lower()
        name = str(item["name"])
        key = f"{kind}:{name}"
        sig.matched.get(kind, set()).discard(name)
        sig.confidences.pop(key, None)
        sig.errors.discard(key)
        sig.values.pop(key, None)
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
        published[key] = entry
