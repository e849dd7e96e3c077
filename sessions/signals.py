"""rolebox's ``signal`` vocabulary, ledgers and the tool's result text (reference rolebox-signals.md §1.1-1.5).

Eight types in four categories. "Terminating" is only a label: the tool never completes a function; a
function completes when its ``continue_until`` condition holds at idle (which may reference the signal).

The function ledger lives in ``FnState.kv["__signals_observed"]`` as ``{type: payload | None}`` (latest per
type; key presence is what counts). A legacy list there is readable by ``signal_observed`` but replaced by
the first write. The session ledger keeps the latest ``{type: payload}`` of the whole session.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Final

__all__ = [
    "ALL_SIGNAL_TYPES",
    "HANDOFF_SIGNALS",
    "INFO_SIGNALS",
    "LEDGER_KEY",
    "PAUSING_SIGNALS",
    "SIGNAL_TYPES",
    "TERMINATING_SIGNALS",
    "TERMINATING_SIGNALS_BY_SEVERITY",
    "UNDEFINED",
    "UnrecognizedSignalType",
    "get_hitl_signal",
    "get_terminating",
    "guard_message",
    "js_string",
    "json_stringify",
    "ledger_view",
    "read_ledger",
    "record_signal",
    "result_text",
]

SIGNAL_TYPES: tuple[str, ...] = (
    "answer",
    "need_approval",
    "blocked",
    "need_clarification",
    "handoff",
    "progress",
    "revise_needed",
    "escalate",
)
TERMINATING_SIGNALS = frozenset({"answer", "revise_needed", "escalate"})
PAUSING_SIGNALS = frozenset({"need_approval", "blocked", "need_clarification"})
HANDOFF_SIGNALS = frozenset({"handoff"})
INFO_SIGNALS = frozenset({"progress"})
# The union in insertion order, as it appears in the runtime guard's message.
ALL_SIGNAL_TYPES: tuple[str, ...] = (
    "answer",
    "revise_needed",
    "escalate",
    "need_approval",
    "blocked",
    "need_clarification",
    "handoff",
    "progress",
)
TERMINATING_SIGNALS_BY_SEVERITY: tuple[str, ...] = ("escalate", "revise_needed", "answer")
HITL_SIGNALS_BY_PRECEDENCE: tuple[str, ...] = ("need_approval", "blocked", "need_clarification")
LEDGER_KEY = "__signals_observed"
DEFAULT_BLOCKED_TIMEOUT_MS = 120_000


class _Undefined:
    """The type of :data:`UNDEFINED`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNDEFINED"


# JavaScript's ``undefined``: a key the input did not have (``String(undefined)`` is ``undefined``)
UNDEFINED: Final = _Undefined()


class UnrecognizedSignalType(ValueError):
    """The runtime guard: raised for a type outside the eight (direct calls that bypassed the schema)."""


def guard_message(signal_type: Any) -> str:
    """The guard's exact text; a type that is not a string is interpolated as JavaScript prints it."""
    return f'Unrecognized signal type: "{js_string(signal_type)}". Valid types: {", ".join(ALL_SIGNAL_TYPES)}'


def _js_number(value: int | float) -> str:
    """``Number#toString()`` of a JSON number: JSON.parse reads every number as a double (an integer beyond the
    float range is Infinity); its shortest round-trip digits (``repr``'s, as JavaScript's) placed by ECMA-262."""
    try:
        number = float(value)
    except OverflowError:
        number = math.inf if value > 0 else -math.inf
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "Infinity" if number > 0 else "-Infinity"
    if number == 0:
        return "0"  # -0 too
    _, digit_tuple, exponent = Decimal(repr(abs(number))).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0")
    point = len(digit_tuple) + int(exponent)  # the number is 0.<digits> x 10**point
    return ("-" if number < 0 else "") + _place_point(digits, point)


def _place_point(digits: str, point: int) -> str:
    """ECMA-262 Number::toString for the significant ``digits`` of 0.<digits> x 10**point."""
    k = len(digits)
    if k <= point <= 21:
        return digits + "0" * (point - k)
    if 0 < point <= 21:
        return f"{digits[:point]}.{digits[point:]}"
    if -6 < point <= 0:
        return "0." + "0" * -point + digits
    exponent = point - 1
    tail = f".{digits[1:]}" if k > 1 else ""
    return f"{digits[0]}{tail}e{'+' if exponent >= 0 else '-'}{abs(exponent)}"


def js_string(value: Any) -> str:
    """JavaScript's ``String(value)`` for JSON values and :data:`UNDEFINED` (where rolebox interpolates one)."""
    if value is UNDEFINED:
        return "undefined"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return _js_number(value)
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return ",".join("" if v is None else js_string(v) for v in value)
    return "[object Object]"


# Number#toString's spellings that JSON.stringify writes as null
_NON_FINITE: Final = frozenset({"NaN", "Infinity", "-Infinity"})
_ARRAY_INDEX: Final = re.compile(r"0|[1-9][0-9]*")  # (fullmatch) a key a JavaScript object orders first
_MAX_ARRAY_INDEX: Final = 2**32 - 2
_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def json_stringify(value: Any) -> str:
    """``JSON.stringify`` of a JSON value: compact, non-ASCII kept, numbers as ``Number#toString`` prints them
    (``2``, ``1e-7``, ``1e+21``; ``json.dumps`` wrote ``2.0`` and ``1e-07``: an audit, finding 1), a non-finite
    number as ``null``, a lone surrogate escaped, an object's array-index keys first in ascending order (as a
    JavaScript object holds them); :data:`UNDEFINED` is left out of an object and ``null`` in an array."""
    if value is None or value is UNDEFINED:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        text = _js_number(value)
        return "null" if text in _NON_FINITE else text
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, Mapping):
        members = [(js_string(k), v) for k, v in value.items() if v is not UNDEFINED]
        return "{" + ",".join(f"{_quote(k)}:{json_stringify(v)}" for k, v in _js_key_order(members)) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(json_stringify(v) for v in value) + "]"
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def _quote(text: str) -> str:
    """A JSON string as JSON.stringify writes it: ``"``, ``\\`` and controls escaped (``json.dumps`` escapes the
    same ones the same way), every other character kept but a lone surrogate (``\\udxxx``)."""
    quoted = json.dumps(text, ensure_ascii=False)
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", quoted)


def _js_key_order(members: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """A JavaScript object's own key order: array indices ascending, then the other keys as inserted."""
    indexed = sorted((m for m in members if _is_array_index(m[0])), key=lambda m: int(m[0]))
    return indexed + [m for m in members if not _is_array_index(m[0])]


def _is_array_index(key: str) -> bool:
    """A canonical array index (``"0"``, ``"17"``; not ``"01"``, ``"-1"`` or 2**32 - 1 and above)."""
    return _ARRAY_INDEX.fullmatch(key) is not None and int(key) <= _MAX_ARRAY_INDEX


def read_ledger(kv: Mapping[str, Any]) -> dict[str, Any]:
    """The ledger as a dict: a copy of a plain object, else a fresh ``{}`` (legacy lists are not migrated)."""
    raw = kv.get(LEDGER_KEY)
    return dict(raw) if isinstance(raw, dict) else {}


def record_signal(kv: dict[str, Any], signal_type: str, payload: Any = None) -> None:
    """Last write wins per type; ``None`` records "no payload" (the key's presence is what counts)."""
    ledger = read_ledger(kv)
    ledger[signal_type] = payload
    kv[LEDGER_KEY] = ledger


def ledger_view(kv: Mapping[str, Any]) -> dict[str, Any]:
    """For display: the Record ledger, or a legacy list shown as ``{type: None}``."""
    raw = kv.get(LEDGER_KEY)
    if isinstance(raw, dict):
        return dict(raw)
    if isinstance(raw, list):
        return {str(t): None for t in raw}
    return {}


def get_terminating(session_ledger: Mapping[str, Any]) -> dict[str, Any] | None:
    """The most severe terminating signal of the session (escalate > revise_needed > answer)."""
    for signal_type in TERMINATING_SIGNALS_BY_SEVERITY:
        if signal_type in session_ledger:
            return {"type": signal_type, "payload": session_ledger[signal_type]}
    return None


def get_hitl_signal(session_ledger: Mapping[str, Any]) -> dict[str, Any] | None:
    """The human-in-the-loop signal of the session (need_approval > blocked > need_clarification)."""
    for signal_type in HITL_SIGNALS_BY_PRECEDENCE:
        if signal_type in session_ledger:
            return {"type": signal_type, "payload": session_ledger[signal_type]}
    return None


def result_text(signal_type: str, payload: Any, *, active: int, recorded_on: int) -> str:
    """The tool's answer. ``active`` is the size of the active set, ``recorded_on`` the functions written."""
    if active == 0:
        return f"signal: {signal_type} acknowledged (no active functions)"
    parts = [f"signal: {signal_type} acknowledged", f"recorded on {recorded_on} function(s)"]
    if signal_type in PAUSING_SIGNALS:
        parts.append("→ function paused")
    elif signal_type in TERMINATING_SIGNALS:
        parts.append("→ satisfies continue_until condition")
    elif signal_type in HANDOFF_SIGNALS:
        target = None
        if isinstance(payload, dict):
            target = payload.get("target")
            if target is None:
                target = payload.get("subagent")
        parts.append(f"→ handoff to {'(unspecified)' if target is None else js_string(target)}")
    else:
        parts.append("→ informational (no state transition)")
    return " | ".join(parts)
