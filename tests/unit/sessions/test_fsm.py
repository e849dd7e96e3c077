"""The function state machine (rolebox reference §1.3, §1.7) on in-memory state."""

from __future__ import annotations

import pytest

from sessions.fsm import FunctionMachine, SessionRuntime
from sessions.functions import FunctionDef, parse_function_file
from sessions.signals import UNDEFINED, UnrecognizedSignalType


def fn(text: str) -> FunctionDef:
    definition, errors, _ = parse_function_file(f"---\n{text}\n---\n", "test.md")
    assert definition is not None, errors
    return definition


def machine(*defs: FunctionDef) -> FunctionMachine:
    return FunctionMachine({d.name: d for d in defs}, session_id="s1")


WORKER = fn("name: worker\ncontinue_until: signal_observed(answer)\ncontinue_max: 5")


class TestSignal:
    def test_records_on_active_functions_with_state(self) -> None:
        """Ledger, __signal_type, count of functions written; inactive functions untouched."""
        m = machine(WORKER, fn("name: other"))
        rt = SessionRuntime()
        m.activate(rt, "worker")
        m.activate(rt, "other")
        m.deactivate(rt, "other")
        out = m.signal(rt, "progress", {"pct": 40})
        assert (
            out
            == "signal: progress acknowledged | recorded on 1 function(s) | → informational (no state transition)"
        )
        assert rt.states["worker"].kv["__signals_observed"] == {"progress": {"pct": 40}}
        assert rt.states["worker"].kv["__signal_type"] == "progress"
        assert "__signals_observed" not in rt.states["other"].kv
        assert rt.session_ledger == {"progress": {"pct": 40}}

    def test_no_active_functions_still_reaches_the_session_ledger(self) -> None:
        """Later rolebox: the session ledger is written first, so signal_observed falls back to it."""
        m = machine(WORKER)
        rt = SessionRuntime()
        assert m.signal(rt, "answer") == "signal: answer acknowledged (no active functions)"
        assert rt.session_ledger == {"answer": None}
        m.activate(rt, "worker")
        assert m.idle(rt, now_ms=0)["completed"] == ["worker"]  # satisfied through the fallback

    def test_guard_after_the_session_write(self) -> None:
        """An unknown type raises the guard's message (and, as in later rolebox, was recorded at session level)."""
        rt = SessionRuntime()
        with pytest.raises(
            UnrecognizedSignalType, match=r'^Unrecognized signal type: "done"\. Valid types: answer, '
        ):
            machine(WORKER).signal(rt, "done")
        assert "done" in rt.session_ledger

    @pytest.mark.parametrize(
        ("value", "spelled", "ledger"),
        [
            (UNDEFINED, "undefined", ["undefined"]),
            (None, "null", ["null"]),
            (True, "true", ["true"]),
            (1.0, "1", ["1"]),
            ({"a": 1}, "[object Object]", ["[object Object]"]),
            (
                ["answer"],
                "answer",
                [],
            ),  # spelled like a real type: recording it would satisfy signal_observed
        ],
    )
    def test_a_bogus_type_is_spelled_as_javascript_spells_it(
        self, value: object, spelled: str, ledger: list[str]
    ) -> None:
        """An audit (finding 7): the guard said "None" and "True", and the session ledger kept those keys. rolebox
        interpolates the JS value (absent: undefined) and records before the guard; an array that prints as one of
        the eight types is refused and not recorded (rolebox's ledger keeps the array, which no lookup finds)."""
        rt = SessionRuntime()
        m = machine(WORKER)
        m.activate(rt, "worker")
        with pytest.raises(UnrecognizedSignalType) as refused:
            m.signal(rt, value)
        assert str(refused.value).startswith(f'Unrecognized signal type: "{spelled}". Valid types: answer, ')
        assert list(rt.session_ledger) == ledger
        assert "__signals_observed" not in rt.states["worker"].kv
        assert m.idle(rt, now_ms=0)["completed"] == []  # continue_until: signal_observed(answer) is not met

    def test_pausing_and_blocked_backstop(self) -> None:
        """Pausing signals gate the function and set evidence.paused; blocked sets the 2-minute backstop."""
        m = machine(WORKER)
        rt = SessionRuntime()
        m.activate(rt, "worker")
        assert m.signal(rt, "blocked", {"on": "ci"}, now_ms=1_000).endswith("→ function paused")
        st = rt.states["worker"]
        assert (st.phase, st.evidence_observed["paused"], st.blocked_at, st.blocked_timeout_ms) == (
            "gated",
            True,
            1_000,
            120_000,
        )
        assert rt.attention == {"worker": {"type": "blocked", "payload": {"on": "ci"}, "since": 1_000}}
        # still blocked at idle before the timeout: no continuation, no completion
        assert m.idle(rt, now_ms=121_000)["reason"] == "no function needs a continuation"
        assert st.phase == "gated"
        # after the timeout: force-unblocked, then evaluated like any active function
        decision = m.idle(rt, now_ms=121_001)
        assert decision["continued"] is True and decision["function"] == "worker"
        assert (st.phase, st.evidence_observed["paused"], st.blocked_at) == ("active", False, None)
        assert rt.attention == {}

    def test_a_resolved_block_does_not_release_a_later_approval(self) -> None:
        """An audit (finding 2): a ``blocked`` resolved through the gate left its backstop behind, and idle
        force-released a later ``need_approval`` past the human. Leaving ``gated`` clears the backstop."""
        m = machine(fn("name: g\ngate: user_approval\ncontinue_until: signal_observed(answer)"))
        rt = SessionRuntime()
        m.activate(rt, "g")
        m.signal(rt, "blocked", now_ms=1_000)
        m.turn(rt, user_messaged=True)  # the gate opens: the block is resolved
        st = rt.states["g"]
        assert (st.phase, st.blocked_at) == ("active", None)
        m.signal(rt, "need_approval", {"plan": "deploy"}, now_ms=2_000)
        decision = m.idle(rt, now_ms=4_000_000_000_000)
        assert decision["continued"] is False and decision["function"] is None
        assert (st.phase, st.evidence_observed["paused"]) == ("gated", True)
        assert rt.attention["g"]["type"] == "need_approval"

    @pytest.mark.parametrize("pause", ["need_approval", "need_clarification"])
    def test_a_later_pause_takes_over_from_a_block(self, pause: str) -> None:
        """A non-``blocked`` pausing signal on a blocked function ends the backstop: only the human releases it."""
        m = machine(WORKER)
        rt = SessionRuntime()
        m.activate(rt, "worker")
        m.signal(rt, "blocked", now_ms=1_000)
        m.signal(rt, pause, now_ms=2_000)
        st = rt.states["worker"]
        assert (st.phase, st.blocked_at) == ("gated", None)
        assert m.idle(rt, now_ms=4_000_000_000_000)["continued"] is False
        assert st.phase == "gated"
        m.signal(rt, "blocked", now_ms=5_000)  # blocked again: a fresh backstop from its own time
        assert m.idle(rt, now_ms=125_000)["continued"] is False
        assert m.idle(rt, now_ms=125_001)["continued"] is True and st.phase == "active"

    def test_the_block_timeout_still_releases_through_a_closed_gate(self) -> None:
        """rolebox §1.7 "gated(blocked) —timeout at idle→ active": a gate that stays closed keeps the backstop
        (the function never left ``gated``), so ``gate: {not: signal_observed(blocked)}`` is released at idle."""
        m = machine(
            fn("name: s\ngate: {not: signal_observed(blocked)}\ncontinue_until: artifact_exists(done)")
        )
        rt = SessionRuntime()
        m.activate(rt, "s")
        m.signal(rt, "blocked", now_ms=1_000)
        m.turn(rt, user_messaged=False)
        st = rt.states["s"]
        assert (st.phase, st.blocked_at) == ("gated", 1_000)
        assert m.idle(rt, now_ms=121_000)["continued"] is False
        assert m.idle(rt, now_ms=121_001)["function"] == "s"
        assert (st.phase, st.evidence_observed["paused"], st.blocked_at) == ("active", False, None)

    def test_capture_payload_ignores_when_args(self) -> None:
        """The signal tool's capture writes any signal's payload (rolebox ignores on/when_args on this path)."""
        capture = fn(
            "name: capture\nobserve:\n  - {on: tool_after, tool: signal, when_args: {match: {type: revise_needed}}, capture_payload_as: items}"
        )
        m = machine(capture)
        rt = SessionRuntime()
        m.activate(rt, "capture")
        m.signal(rt, "progress", {"a": "é"})
        assert rt.artifacts == {"items": '{"a":"é"}'}
        m.signal(rt, "answer")
        assert rt.artifacts == {"items": '{"a":"é"}'}  # no payload: nothing captured


class TestTurn:
    def test_gate_overwrites_phase_every_turn(self) -> None:
        """With a gate, each turn sets the phase from it, even over a pausing signal or 'complete'."""
        gated = fn("name: g\ngate: artifact_exists(go)\ncontinue_until: artifact_exists(done)")
        m = machine(gated)
        rt = SessionRuntime()
        m.activate(rt, "g")
        m.turn(rt, user_messaged=False)
        assert rt.states["g"].phase == "gated"
        rt.artifacts["go"] = "1"
        m.signal(rt, "need_approval")
        assert rt.states["g"].phase == "gated"
        m.turn(rt, user_messaged=False)
        assert rt.states["g"].phase == "active"
        rt.artifacts["done"] = "1"
        m.idle(rt, now_ms=0)
        assert rt.states["g"].phase == "complete"
        m.turn(rt, user_messaged=False)
        assert rt.states["g"].phase == "active"  # the gate re-evaluation overwrote 'complete'

    def test_without_gate_a_pause_sticks(self) -> None:
        """No gate: a pausing signal's 'gated' survives turns."""
        m = machine(WORKER)
        rt = SessionRuntime()
        m.activate(rt, "worker")
        m.signal(rt, "need_clarification")
        m.turn(rt, user_messaged=True)
        assert rt.states["worker"].phase == "gated"

    def test_user_approval_reopens_gate(self) -> None:
        """user_approval is whether the user messaged this turn."""
        approval = fn("name: a\ngate: {any: [user_approval, {not: signal_observed(need_approval)}]}")
        m = machine(approval)
        rt = SessionRuntime()
        m.activate(rt, "a")
        m.signal(rt, "need_approval")
        m.turn(rt, user_messaged=False)
        assert rt.states["a"].phase == "gated"
        m.turn(rt, user_messaged=True)
        assert rt.states["a"].phase == "active" and rt.states["a"].current_turn == 2

    def test_transitions(self) -> None:
        """Transitions activate others (state kept, activatedAtTurn reset), deactivate only themselves, never locked ones."""
        main = fn(
            "name: main\ntransitions:\n  - {when: signal_observed(escalate), activate: [help], deactivate: [main, help]}\n  - {when: gate, activate: [never]}"
        )
        m = machine(main, fn("name: help"), fn("name: never"))
        rt = SessionRuntime()
        m.activate(rt, "main")
        m.turn(rt, user_messaged=False)
        assert rt.active == ["main"]  # no gate: gate_satisfied stays False
        m.signal(rt, "escalate")
        m.turn(rt, user_messaged=False)
        assert rt.active == ["help"]
        assert rt.states["help"].activated_at_turn == rt.states["help"].current_turn == 0
        locked = SessionRuntime()
        m.activate(locked, "main", locked=True)
        m.signal(locked, "escalate")
        m.turn(locked, user_messaged=False)
        assert locked.active == ["main", "help"]

    def test_every_state_advances(self) -> None:
        """turn adds 1 to every function state's currentTurn, active or not."""
        m = machine(WORKER, fn("name: idle"))
        rt = SessionRuntime()
        m.activate(rt, "worker")
        m.activate(rt, "idle")
        m.deactivate(rt, "idle")
        m.turn(rt, user_messaged=False)
        assert [rt.states[n].current_turn for n in ("worker", "idle")] == [1, 1]


class TestIdle:
    def test_caps_cooldowns_and_final_wording(self) -> None:
        """Reminders count up to continue_max with the FINAL sentence; cooldowns at 3 (1 turn); then the per-fn cap."""
        m = machine(fn("name: w\ncontinue_until: artifact_exists(done)\ncontinue_max: 4"))
        rt = SessionRuntime()
        m.activate(rt, "w")
        reminders = []
        for _ in range(3):
            m.turn(rt, user_messaged=False)
            reminders.append(m.idle(rt, now_ms=0)["reminder"])
        assert reminders[0] == (
            "<system-reminder>[auto-continue 1/4 for w: completion condition not yet met] Continue until this "
            "function's completion condition is met. Do not stop yet.</system-reminder>"
        )
        st = rt.states["w"]
        assert st.cooldown_until_turn == st.current_turn + 1  # set at the 3rd continuation
        assert m.idle(rt, now_ms=0) == {
            "continued": False,
            "function": "w",
            "reason": "cooldown",
            "reminder": None,
            "completed": [],
        }
        m.turn(rt, user_messaged=False)
        final = m.idle(rt, now_ms=0)["reminder"]
        assert final.endswith(
            "Do not stop yet. This is your FINAL continuation — produce your output NOW, even if incomplete.</system-reminder>"
        )
        assert "[auto-continue 4/4 for w:" in final
        m.turn(rt, user_messaged=False)
        assert m.idle(rt, now_ms=0)["reason"] == "per-fn cap"

    def test_cooldown_at_five(self) -> None:
        """The 5th continuation sets a 3-turn cooldown."""
        m = machine(fn("name: w\ncontinue_until: artifact_exists(done)\ncontinue_max: 9"))
        rt = SessionRuntime()
        m.activate(rt, "w")
        st = rt.states["w"]
        while st.continuation_count < 5:
            m.turn(rt, user_messaged=False)
            m.idle(rt, now_ms=0)
        assert st.cooldown_until_turn == st.current_turn + 3

    @pytest.mark.parametrize(
        ("kwargs", "reason"),
        [
            ({"last_two_outputs_identical": True}, "loop detected"),
            ({"model_asked_question": True}, "model asked a question"),
        ],
    )
    def test_loop_and_question(self, kwargs: dict[str, bool], reason: str) -> None:
        """Loop and question inputs block the continuation with their reasons."""
        m = machine(WORKER)
        rt = SessionRuntime()
        m.activate(rt, "worker")
        assert m.idle(rt, now_ms=0, **kwargs)["reason"] == reason
        assert rt.states["worker"].continuation_count == 0

    def test_global_cap_and_one_continuation_per_idle(self) -> None:
        """25 continuations across the session stop everything; one continuation per idle, first active first."""
        m = machine(WORKER, fn("name: second\ncontinue_until: artifact_exists(x)"))
        rt = SessionRuntime()
        m.activate(rt, "worker")
        m.activate(rt, "second")
        first = m.idle(rt, now_ms=0)
        assert first["function"] == "worker" and rt.states["second"].continuation_count == 0
        rt.states["second"].continuation_count = 24
        rt.states["worker"].continuation_count = 1
        assert m.idle(rt, now_ms=0)["reason"] == "global cap"

    def test_requires_evidence_and_completion(self) -> None:
        """Unmet requires_evidence skips the function; continue_until completes it (user_approval is false here)."""
        needs = fn(
            "name: n\nrequires_evidence: [tests]\ncontinue_until: {any: [user_approval, artifact_exists(done)]}"
        )
        m = machine(needs)
        rt = SessionRuntime()
        m.activate(rt, "n")
        assert m.idle(rt, now_ms=0)["function"] is None
        m.tool_after(rt, "tests")  # a tool named like the tag marks it
        assert m.idle(rt, now_ms=0)["function"] == "n"
        rt.artifacts["done"] = "1"
        assert m.idle(rt, now_ms=0)["completed"] == ["n"]
        assert m.idle(rt, now_ms=0)["completed"] == []  # complete functions are skipped


class TestToolAfter:
    def test_observe_filters_and_effects(self) -> None:
        """when_output / when_args filters, set_evidence, capture_payload_as, sync_todos, inject."""
        spec = fn(
            "name: o\nobserve:\n"
            "  - {on: tool_after, tool: bash, when_output: {contains: PASS, not_contains: FAIL}, set_evidence: green, inject: tests passed}\n"
            "  - {on: tool_after, tool: signal, when_args: {match: {type: revise_needed}}, capture_payload_as: revise}\n"
            "  - {on: tool_after, tool: todowrite, sync_todos: true}\n"
            "  - {on: tool_after, tool: edit, when_args: {not_match: {path: README.md}}, set_evidence: edited}"
        )
        m = machine(spec)
        rt = SessionRuntime()
        m.activate(rt, "o")
        assert m.tool_after(rt, "bash", output="1 FAIL, 3 PASS") == []
        assert m.tool_after(rt, "bash", output="3 PASS") == ["tests passed"]
        st = rt.states["o"]
        assert st.evidence_observed == {"green": True}
        m.tool_after(rt, "signal", {"type": "progress", "payload": {"x": 1}})
        assert "revise" not in rt.artifacts and rt.artifacts["__signal_payload"] == '{"x":1}'
        m.tool_after(rt, "signal", {"type": "revise_needed", "payload": {"items": [1]}})
        assert rt.artifacts["revise"] == '{"items":[1]}'
        m.tool_after(rt, "todowrite", {"todos": [{"content": "a", "status": "completed"}, {"content": "b"}]})
        assert st.kv["__todos"] == "- [x] a\n- [ ] b"
        m.tool_after(rt, "edit", {"path": "README.md"})
        assert "edited" not in st.evidence_observed
        m.tool_after(rt, "edit")  # when_args without args: skipped
        assert "edited" not in st.evidence_observed
        m.tool_after(rt, "edit", {"path": "src/a.py"})
        assert st.evidence_observed["edited"] is True
        assert st.tools_observed == ["bash", "signal", "todowrite", "edit"]
        assert st.kv["__signal_type"] == "revise_needed"

    def test_legacy_list_ledger_from_observe(self) -> None:
        """The observe path appends to a legacy list ledger; the tool's Record ledger is left alone."""
        m = machine(WORKER)
        rt = SessionRuntime()
        m.activate(rt, "worker")
        rt.states["worker"].kv["__signals_observed"] = ["progress"]
        m.tool_after(rt, "signal", {"type": "answer"})
        assert rt.states["worker"].kv["__signals_observed"] == ["progress", "answer"]


class TestJavaScriptFidelity:
    def test_captured_payloads_are_json_stringify_text(self) -> None:
        """An audit (finding 1): a captured payload read ``{"score":2.0,"small":1e-07}``; rolebox writes
        ``JSON.stringify(payload)``, so the tool's capture and the observe path's both read ``2`` and ``1e-7``."""
        capture = fn("name: cap\nobserve:\n  - {on: tool_after, tool: signal, capture_payload_as: cap}")
        m = machine(capture)
        rt = SessionRuntime()
        m.activate(rt, "cap")
        m.signal(rt, "answer", {"score": 2.0, "small": 1e-7})
        assert rt.artifacts == {"cap": '{"score":2,"small":1e-7}'}
        m.tool_after(rt, "signal", {"type": "answer", "payload": {"big": 1e21, "n": [1.0]}})
        assert rt.artifacts["cap"] == rt.artifacts["__signal_payload"] == '{"big":1e+21,"n":[1]}'

    def test_when_args_match_compares_json_stringify_text(self) -> None:
        """An audit (finding 1): ``match: {score: 1.0}`` did not match the args ``{"score": 1}`` (``1.0`` against
        ``1``); in rolebox both are ``1``. A key the args lack is ``undefined``, which matches not even null."""
        graded = fn(
            "name: g\nobserve:\n"
            "  - {on: tool_after, tool: grade, when_args: {match: {score: 1.0}}, set_evidence: graded}\n"
            "  - {on: tool_after, tool: note, when_args: {match: {tag: null}}, set_evidence: tagged}"
        )
        m = machine(graded)
        rt = SessionRuntime()
        m.activate(rt, "g")
        m.tool_after(rt, "note", {})
        assert rt.states["g"].evidence_observed == {}
        m.tool_after(rt, "grade", {"score": 1})
        m.tool_after(rt, "note", {"tag": None})
        assert rt.states["g"].evidence_observed == {"graded": True, "tagged": True}

    def test_a_spec_without_a_tool_never_fires(self) -> None:
        """An audit (finding 4): a ``tool_after`` spec with no ``tool`` fired on every tool; rolebox requires
        ``spec.tool === tool``, which ``undefined`` never is."""
        m = machine(fn("name: any\nobserve:\n  - {on: tool_after, set_evidence: seen, inject: hi}"))
        rt = SessionRuntime()
        m.activate(rt, "any")
        assert m.tool_after(rt, "bash", {}, "x") == []
        assert rt.states["any"].evidence_observed == {}

    def test_capture_payload_as_takes_a_defined_null(self) -> None:
        """The observe path captures ``args.payload`` when it is defined: a null payload is written as ``null``;
        args without one capture nothing."""
        m = machine(fn("name: cap\nobserve:\n  - {on: tool_after, tool: signal, capture_payload_as: cap}"))
        rt = SessionRuntime()
        m.activate(rt, "cap")
        m.tool_after(rt, "signal", {"type": "answer"})
        assert "cap" not in rt.artifacts
        m.tool_after(rt, "signal", {"type": "answer", "payload": None})
        assert rt.artifacts["cap"] == "null"

    def test_a_continue_until_ending_in_a_line_break_never_holds(self) -> None:
        """An audit (finding 2): YAML's ``|`` keeps a final newline, and ``signal_observed(answer)\\n`` completed
        the function here; in rolebox it is no call (an unknown name, false), so the idle sends a continuation."""
        literal = fn("name: lit\ncontinue_until: |\n  signal_observed(answer)\ncontinue_max: 2")
        assert literal.continue_until == "signal_observed(answer)\n"
        m = machine(literal)
        rt = SessionRuntime()
        m.activate(rt, "lit")
        m.signal(rt, "answer")
        decision = m.idle(rt, now_ms=0)
        assert decision["completed"] == [] and decision["continued"] is True
        assert rt.states["lit"].phase == "active"
