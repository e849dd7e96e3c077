"""The signal tool's vocabulary, result strings and ledgers (rolebox reference §1.1-1.5)."""

from __future__ import annotations

from typing import Any

import pytest

from sessions.signals import (
    ALL_SIGNAL_TYPES,
    SIGNAL_TYPES,
    UNDEFINED,
    get_hitl_signal,
    get_terminating,
    guard_message,
    js_string,
    json_stringify,
    ledger_view,
    read_ledger,
    record_signal,
    result_text,
)


def test_vocabulary() -> None:
    """Eight types; the guard lists them in the union's insertion order."""
    assert SIGNAL_TYPES == (
        "answer",
        "need_approval",
        "blocked",
        "need_clarification",
        "handoff",
        "progress",
        "revise_needed",
        "escalate",
    )
    assert set(ALL_SIGNAL_TYPES) == set(SIGNAL_TYPES)
    assert guard_message("Answer") == (
        'Unrecognized signal type: "Answer". Valid types: answer, revise_needed, escalate, need_approval, blocked, '
        "need_clarification, handoff, progress"
    )


@pytest.mark.parametrize(
    ("value", "spelled"),
    [
        (UNDEFINED, "undefined"),
        (None, "null"),
        (True, "true"),
        (False, "false"),
        (7, "7"),
        (-0.0, "0"),
        (1.0, "1"),
        (0.1, "0.1"),
        (1.5e-6, "0.0000015"),
        (1e-7, "1e-7"),
        (-2.5e-8, "-2.5e-8"),
        (5e-324, "5e-324"),
        (123456789012345680000.0, "123456789012345680000"),
        (1e21, "1e+21"),
        (10**21, "1e+21"),
        (12345678901234567890, "12345678901234567000"),  # JSON.parse reads it as the nearest double
        (10**400, "Infinity"),
        (-(10**400), "-Infinity"),
        (["a", None, 2.0], "a,,2"),
        ({"k": 1}, "[object Object]"),
    ],
)
def test_guard_message_spells_the_value_as_javascript_does(value: Any, spelled: str) -> None:
    """An audit (finding 7): the guard interpolates the JS value (``String(type)``), not Python's ``str``: absent
    is ``undefined``, null ``null``, booleans lower-case, numbers as ``Number#toString`` prints them."""
    assert js_string(value) == spelled
    assert guard_message(value).startswith(f'Unrecognized signal type: "{spelled}". Valid types: answer, ')


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ({"score": 2.0, "small": 1e-7}, '{"score":2,"small":1e-7}'),
        ([1.0, -0.0, 0.5, 1e21, 1.5e-6, 10**21, 123e-20], "[1,0,0.5,1e+21,0.0000015,1e+21,1.23e-18]"),
        ([float("nan"), float("inf"), 10**400], "[null,null,null]"),  # not finite: null
        ({"a": [True, False, None]}, '{"a":[true,false,null]}'),
        ({"é": "ü ☃"}, '{"é":"ü ☃"}'),  # non-ASCII kept, no spaces
        ('"\\\b\f\n\r\t\x01\x1f\x7f\u2028', '"\\"\\\\\\b\\f\\n\\r\\t\\u0001\\u001f\x7f\u2028"'),
        ("a\ud800b", '"a\\ud800b"'),  # a lone surrogate is escaped (well-formed JSON.stringify)
        ({"b": 1, "2": 2, "a": 3, "1": 4, "01": 5, "-1": 6}, '{"1":4,"2":2,"b":1,"a":3,"01":5,"-1":6}'),
        ({"k": UNDEFINED, "n": 1}, '{"n":1}'),
    ],
)
def test_json_stringify_writes_what_javascript_writes(value: Any, text: str) -> None:
    """An audit (finding 1): ``json.dumps`` wrote ``2.0`` and ``1e-07`` where ``JSON.stringify`` writes ``2`` and
    ``1e-7``; numbers are ``Number#toString``'s, array-index keys come first, as in a JavaScript object."""
    assert json_stringify(value) == text


@pytest.mark.parametrize(
    ("signal_type", "tail"),
    [
        ("need_approval", "→ function paused"),
        ("blocked", "→ function paused"),
        ("need_clarification", "→ function paused"),
        ("answer", "→ satisfies continue_until condition"),
        ("revise_needed", "→ satisfies continue_until condition"),
        ("escalate", "→ satisfies continue_until condition"),
        ("progress", "→ informational (no state transition)"),
    ],
)
def test_result_per_category(signal_type: str, tail: str) -> None:
    """Each category has its own last part."""
    assert (
        result_text(signal_type, None, active=2, recorded_on=2)
        == f"signal: {signal_type} acknowledged | recorded on 2 function(s) | {tail}"
    )


@pytest.mark.parametrize(
    ("payload", "target"),
    [
        ({"target": "reviewer"}, "reviewer"),
        ({"subagent": "coder"}, "coder"),
        ({"target": "reviewer", "subagent": "coder"}, "reviewer"),
        ({"target": ""}, ""),  # nullish coalescing keeps an empty string
        ({"target": None, "subagent": "coder"}, "coder"),
        ({"target": 7}, "7"),
        ({}, "(unspecified)"),
        (None, "(unspecified)"),
    ],
)
def test_handoff_target(payload: Any, target: str) -> None:
    """target ?? subagent ?? "(unspecified)"."""
    assert result_text("handoff", payload, active=1, recorded_on=1).endswith(f"→ handoff to {target}")


def test_no_active_functions_and_zero_recorded() -> None:
    """With no active function the text says so; active but stateless functions record on 0."""
    assert (
        result_text("answer", None, active=0, recorded_on=0)
        == "signal: answer acknowledged (no active functions)"
    )
    assert result_text("answer", None, active=1, recorded_on=0) == (
        "signal: answer acknowledged | recorded on 0 function(s) | → satisfies continue_until condition"
    )


class TestFunctionLedger:
    def test_last_write_wins_and_null_payload(self) -> None:
        """One entry per type, latest payload, None when recorded without payload; presence is what counts."""
        kv: dict[str, Any] = {}
        record_signal(kv, "progress", {"step": 1})
        record_signal(kv, "progress", {"step": 2})
        record_signal(kv, "answer")
        assert read_ledger(kv) == {"progress": {"step": 2}, "answer": None}
        assert "answer" in read_ledger(kv)

    def test_legacy_list_is_readable_but_replaced_on_write(self) -> None:
        """A legacy list is ignored by the reader and replaced by the first write (its entries are lost)."""
        kv: dict[str, Any] = {"__signals_observed": ["answer"]}
        assert read_ledger(kv) == {}
        assert ledger_view(kv) == {"answer": None}
        record_signal(kv, "progress")
        assert kv["__signals_observed"] == {"progress": None}


class TestSessionLedger:
    def test_terminating_precedence_ignores_order(self) -> None:
        """escalate > revise_needed > answer, whatever the order they were recorded in."""
        assert get_terminating({"answer": None, "escalate": {"why": "x"}}) == {
            "type": "escalate",
            "payload": {"why": "x"},
        }
        assert get_terminating({"answer": 1, "revise_needed": 2}) == {"type": "revise_needed", "payload": 2}
        assert get_terminating({"progress": None}) is None

    def test_hitl_precedence(self) -> None:
        """need_approval > blocked > need_clarification."""
        assert get_hitl_signal({"need_clarification": None, "blocked": 1}) == {
            "type": "blocked",
            "payload": 1,
        }
        assert get_hitl_signal({"need_clarification": None, "need_approval": 2})["type"] == "need_approval"  # type: ignore[index]
        assert get_hitl_signal({}) is None
