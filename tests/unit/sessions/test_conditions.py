"""The condition language and its nine built-ins (rolebox reference §1.6)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from sessions.conditions import CondEnv, ConditionRegistry, js_to_number, parse_call
from sessions.fsm import FnState


def _env(state: FnState | None = None, **kwargs: Any) -> CondEnv:
    return CondEnv(
        session_id="s", fn_name="f", state=state or FnState(), artifacts=kwargs.pop("artifacts", {}), **kwargs
    )


REG = ConditionRegistry()


def test_grammar() -> None:
    """name(arg) with the argument trimmed; a bare name has arg ""; anything else is looked up whole."""
    assert parse_call("artifact_exists( plan )") == ("artifact_exists", "plan")
    assert parse_call("user_approval") == ("user_approval", "")
    assert parse_call("Artifact_exists(plan)") == ("Artifact_exists(plan)", "")


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        (None, False),
        ("unknown_thing(x)", False),
        ("Signal_observed(answer)", False),  # uppercase: the regex fails, the whole string is unknown
        ({"all": []}, True),
        ({"any": []}, False),
        ({"not": "unknown"}, True),
        ({"all": ["artifact_exists(a)", {"not": "artifact_exists(b)"}]}, True),
        ({"any": ["artifact_exists(b)", "artifact_exists(a)"]}, True),
        ({"nope": []}, False),
        (42, False),
    ],
)
def test_combinators(condition: Any, expected: bool) -> None:
    """all / any / not, None and unknown shapes are false, unknown names are false."""
    assert REG.evaluate(condition, _env(artifacts={"a": "x"})) is expected


def test_builtins() -> None:
    """Each built-in, triggered and not triggered."""
    st = FnState(
        kv={"__todos": "- [x] a\n- [ ] b", "mode": 3, "flag": True}, evidence_observed={"tests": True}
    )
    st.tools_observed.append("bash")
    st.current_turn, st.activated_at_turn = 5, 2
    env = _env(
        st, required_evidence=["tests"], user_messaged_this_turn=True, artifacts={"plan": "- [x] done"}
    )
    assert REG.evaluate("user_approval", env) and not REG.evaluate("user_approval", _env())
    assert REG.evaluate("artifact_exists(plan)", env) and not REG.evaluate("artifact_exists(result)", env)
    assert not REG.evaluate("plan_todos_complete", env)  # kv.__todos wins over the plan artifact
    st.kv["__todos"] = "- [x] a\n- [x] b"
    assert REG.evaluate("plan_todos_complete", env)
    assert REG.evaluate("plan_todos_complete", _env(artifacts={"plan": "- [x] one"}))
    assert not REG.evaluate("plan_todos_complete", _env())
    assert REG.evaluate("evidence_met", env) and not REG.evaluate(
        "evidence_met", _env(required_evidence=["tests"])
    )
    assert REG.evaluate("tool_observed(bash)", env) and not REG.evaluate("tool_observed(edit)", env)
    assert REG.evaluate("turn_count(3)", env) and not REG.evaluate("turn_count(4)", env)
    assert REG.evaluate("turn_count()", env) and not REG.evaluate("turn_count(abc)", env)
    assert REG.evaluate("state_eq(mode=3)", env) and REG.evaluate("state_eq(flag=true)", env)
    assert REG.evaluate("state_eq(missing=undefined)", env) and not REG.evaluate("state_eq(mode=4)", env)


def test_signal_observed_formats_and_session_fallback() -> None:
    """Record ledger by key presence, legacy list by membership, then the session ledger."""
    record = FnState(kv={"__signals_observed": {"answer": None}})
    legacy = FnState(kv={"__signals_observed": ["blocked"]})
    assert REG.evaluate("signal_observed(answer)", _env(record))
    assert REG.evaluate("signal_observed(blocked)", _env(legacy))
    assert not REG.evaluate("signal_observed(escalate)", _env(record))
    assert REG.evaluate("signal_observed(escalate)", _env(record, session_ledger={"escalate": None}))
    assert REG.evaluate(
        "signal_observed(anything)", _env(FnState(kv={"__signals_observed": {"anything": 1}}))
    )


def test_plan_incomplete(tmp_path: Path) -> None:
    """A plan file with an unchecked box; no workspace → false."""
    plans = tmp_path / ".rolebox" / "plans"
    plans.mkdir(parents=True)
    (plans / "a.md").write_text("- [x] one\n")
    (plans / "b.md").write_text("- [ ] two\n")
    assert REG.evaluate("plan_incomplete(b)", _env(workspace_dir=tmp_path))
    assert not REG.evaluate("plan_incomplete(a)", _env(workspace_dir=tmp_path))
    assert REG.evaluate("plan_incomplete", _env(workspace_dir=tmp_path))
    assert not REG.evaluate("plan_incomplete", _env())


def test_register_custom_condition(caplog: pytest.LogCaptureFixture) -> None:
    """A registered condition is callable by name; replacing one warns."""
    registry = ConditionRegistry()
    registry.register("kv_has", lambda arg, env: arg in env.state.kv)
    assert registry.evaluate("kv_has(x)", _env(FnState(kv={"x": 1})))
    registry.register("user_approval", lambda arg, env: True)
    assert "already registered" in caplog.text
    assert registry.evaluate("user_approval", _env())
    assert not REG.evaluate("kv_has(x)", _env(FnState(kv={"x": 1})))  # registries are independent


@pytest.mark.parametrize(
    "text", ["signal_observed(answer)\n", "artifact_exists(a)\n", "artifact_exists(a)\r\n"]
)
def test_a_call_with_a_trailing_line_break_is_no_call(text: str) -> None:
    """An audit (finding 2): the grammar ends in ``$``, which in JavaScript is the very end (Python's passes a
    final ``\\n``): rolebox looks the whole string up, finds no such name, and the condition is false."""
    assert parse_call(text) == (text, "")
    env = _env(FnState(kv={"__signals_observed": {"answer": None}}), artifacts={"a": "x"})
    assert not REG.evaluate(text, env)
    assert REG.evaluate(text.rstrip(), env)


def test_the_argument_is_trimmed_of_javascript_whitespace() -> None:
    """``trim()`` takes the BOM and no-break spaces, and leaves the separators Python's ``strip`` also takes."""
    assert parse_call("artifact_exists(\ufeff\u00a0\u3000 plan\u2029\t)") == ("artifact_exists", "plan")
    assert parse_call("artifact_exists(\x1cplan\x85)") == ("artifact_exists", "\x1cplan\x85")


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("", 0.0),
        (" \t\n\ufeff\u00a0", 0.0),
        ("16", 16.0),
        (" 16 ", 16.0),
        ("0x10", 16.0),
        ("0X1f", 31.0),
        ("0o17", 15.0),
        ("0b11", 3.0),
        ("1e1", 10.0),
        ("+.5", 0.5),
        ("5.", 5.0),
        ("-2.5E-1", -0.25),
        ("Infinity", math.inf),
        ("+Infinity", math.inf),
        ("-Infinity", -math.inf),
        ("0x" + "f" * 300, math.inf),
        ("1_0", math.nan),
        ("١٢", math.nan),  # Arabic-Indic digits
        ("１２", math.nan),  # fullwidth digits
        ("-0x10", math.nan),
        ("0x", math.nan),
        ("0b12", math.nan),
        ("inf", math.nan),
        ("nan", math.nan),
        ("infinity", math.nan),
        ("1e", math.nan),
        (".", math.nan),
        ("1 2", math.nan),
        ("\x1c5", math.nan),  # not JavaScript whitespace
        ("abc", math.nan),
    ],
)
def test_js_to_number_is_ecmascript_string_to_number(text: str, number: float) -> None:
    """``Number(text)``: JavaScript's whitespace trimmed, empty 0, 0x/0o/0b, decimals, signed Infinity, else NaN."""
    got = js_to_number(text)
    assert (math.isnan(got) and math.isnan(number)) or got == number


@pytest.mark.parametrize(
    ("arg", "holds"),
    [("0x10", True), ("0b11", True), ("0x15", False), ("1_0", False), ("١٢", False), ("-Infinity", True)],
)
def test_turn_count_reads_its_bound_as_javascript_number(arg: str, holds: bool) -> None:
    """An audit (finding 3): after 20 turns ``turn_count(0x10)`` held in rolebox but not here, and
    ``turn_count(1_0)`` / ``turn_count(١٢)`` held here though ``Number`` makes them NaN (false)."""
    st = FnState()
    st.current_turn = 20
    assert REG.evaluate(f"turn_count({arg})", _env(st)) is holds
