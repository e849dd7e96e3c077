"""``functions simulate`` (sessions/simulate.py, producers/cli/functions.py): one JSON line per step, whatever a
line holds: ``NaN`` or ``Infinity`` (not JSON) and nesting too deep are that line's error, and the lines after it
still run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from producers.cli.main import main
from sessions.fsm import FunctionMachine
from sessions.functions import parse_function_file
from sessions.simulate import BLANK_LINE, run_script
from tests.conftest import ROOT

FUNCTIONS = ROOT / "examples" / "functions"
DEEP = "[" * 5000 + "]" * 5000
SCRIPT = [
    '{"activate": "approval"}',
    '{"signal": {"type": "progress", "payload": {"x": NaN}}}',
    '{"set": {"key": "k", "value": [Infinity, 1e999]}}',
    '{"tool": {"name": "t", "args": ' + DEEP + "}}",
    DEEP,
    '{"turn": {"userMessaged": false}}',
]


def _strict(text: str) -> Any:
    """``text`` as JSON, refusing the NaN and Infinity that ``json.loads`` would take."""

    def refuse(literal: str) -> Any:
        raise AssertionError(f"not JSON: {literal}")

    return json.loads(text, parse_constant=refuse)


def _machine() -> FunctionMachine:
    definition, errors, _ = parse_function_file("---\nname: approval\n---\n", "approval.md")
    assert definition is not None, errors
    return FunctionMachine({"approval": definition}, session_id="simulation")


class TestRunScript:
    def test_non_finite_numbers_and_deep_nesting_are_line_errors(self) -> None:
        """NaN, Infinity, 1e999 and 5000-deep arrays are each their line's error; every step has an output."""
        outputs = list(run_script(_machine(), SCRIPT))
        assert [out["step"] for out, _ in outputs] == [0, 1, 2, 3, 4, 5]
        errors = [error for _, error in outputs]
        assert errors[0] is None and errors[5] is None
        assert errors[1] is not None and errors[1].startswith("line 2: NaN is not JSON")
        assert errors[2] is not None and errors[2].startswith("line 3: Infinity is not JSON")
        assert (
            errors[3] == "line 4: nested too deep to read" and errors[4] == "line 5: nested too deep to read"
        )
        for out, _ in outputs:
            json.dumps(out, allow_nan=False)  # every output line is JSON
        assert outputs[5][0]["functions"]["approval"]["currentTurn"] == 1

    def test_a_step_missing_what_the_contract_requires_is_its_lines_error(self) -> None:
        """A contract audit: ``{"set": {"key": "k"}}`` wrote null unseen and ``{"idle": {"nowMs": -1}}`` ran
        (the HTTP route refuses it); each is now that line's error, and the script goes on."""
        script = [
            '{"set": {"key": "k"}}',
            '{"idle": {"nowMs": -1}}',
            '{"idle": {"nowMs": 1e30}}',
            '{"turn": {}}',
        ]
        errors = [error for _, error in run_script(_machine(), script)]
        assert errors[0] == "line 1: set.value: is required"
        assert errors[1] is not None and errors[1].startswith("line 2: idle.nowMs: must be an integer")
        assert errors[2] is not None and errors[2].startswith("line 3: idle.nowMs")
        assert errors[3] is None  # userMessaged is false when absent, as over HTTP

    def test_an_unknown_deactivate_and_a_flag_that_is_not_boolean_are_their_lines_error(self) -> None:
        """An audit: ``{"deactivate": "nosuch"}`` passed silently and ``"lastTwoOutputsIdentical": "no"`` was read
        as true (any non-empty string was); each is now that line's error naming the field, as over HTTP, and a
        defined function that is not active still deactivates quietly."""
        script = [
            '{"activate": "approval"}',
            '{"deactivate": "nosuch"}',
            '{"idle": {"nowMs": 1, "lastTwoOutputsIdentical": "no"}}',
            '{"idle": {"nowMs": 1, "modelAskedQuestion": 1}}',
            '{"idle": {"nowMs": 1, "lastTwoOutputsIdentical": false}}',
            '{"deactivate": "approval"}',
            '{"deactivate": "approval"}',
        ]
        outputs = list(run_script(_machine(), script))
        errors = [error for _, error in outputs]
        assert errors[1] == "line 2: deactivate: unknown function 'nosuch'"
        assert errors[2] == "line 3: idle.lastTwoOutputsIdentical: must be true or false"
        assert errors[3] == "line 4: idle.modelAskedQuestion: must be true or false"
        assert errors[0] is None and errors[4:] == [None, None, None], errors
        assert outputs[2][0]["result"] == {"error": "idle.lastTwoOutputsIdentical: must be true or false"}
        assert outputs[5][0]["functions"]["approval"]["active"] is False

    def test_a_blank_line_is_its_own_error_so_line_i_is_output_i(self) -> None:
        """An audit (finding 6): a blank line printed nothing, so every later step's number was one less than its
        line's; stdout carries exactly one object per input line (the outside contract), a blank line's an error."""
        script = ['{"activate": "approval"}', "", "   ", '{"turn": {"userMessaged": false}}']
        outputs = list(run_script(_machine(), script))
        assert [out["step"] for out, _ in outputs] == [0, 1, 2, 3]
        assert [error for _, error in outputs] == [
            None,
            f"line 2: {BLANK_LINE}",
            f"line 3: {BLANK_LINE}",
            None,
        ]
        assert outputs[1][0]["result"] == {"error": BLANK_LINE}
        assert outputs[3][0]["functions"]["approval"]["currentTurn"] == 1

    def test_a_null_payload_is_its_lines_error(self) -> None:
        """``payload`` is an object or absent, as over HTTP (a 422 there): null is that line's error, nothing
        recorded; an absent payload records null."""
        script = [
            '{"activate": "approval"}',
            '{"signal": {"type": "answer", "payload": null}}',
            '{"signal": {"type": "progress"}}',
        ]
        outputs = list(run_script(_machine(), script))
        assert outputs[1][1] == "line 2: signal.payload: must be an object"
        assert outputs[2][1] is None
        assert outputs[2][0]["functions"]["approval"]["ledger"] == {"progress": None}


def _worker() -> FunctionMachine:
    definition, errors, _ = parse_function_file(
        "---\nname: worker\ncontinue_until: signal_observed(answer)\n---\n", "worker.md"
    )
    assert definition is not None, errors
    return FunctionMachine({"worker": definition}, session_id="simulation")


def _results(script: list[str], wall_clock_s: float) -> list[Any]:
    """Each step's result, with the wall clock stopped at ``wall_clock_s``."""
    with mock.patch("time.time", return_value=wall_clock_s):
        return [out["result"] for out, _ in run_script(_worker(), script)]


class TestScriptClock:
    def test_a_signal_step_takes_now_ms(self) -> None:
        """An audit (finding 4): a signal step stamped the blocked backstop with the wall clock, so a script could
        not say "2 minutes after the block". ``signal.nowMs`` is that time; the answer is the same on any day."""
        script = [
            '{"activate": "worker"}',
            '{"signal": {"type": "blocked", "nowMs": 1000}}',
            '{"idle": {"nowMs": 121000}}',
            '{"idle": {"nowMs": 121001}}',
        ]
        for wall_clock_s in (1_700_000_000.0, 1_799_999_990.0):
            results = _results(script, wall_clock_s)
            assert (
                results[2]["continued"] is False
                and results[2]["reason"] == "no function needs a continuation"
            )
            assert results[3]["continued"] is True and results[3]["function"] == "worker"

    def test_without_now_ms_a_signal_takes_the_last_one_given_and_idle_the_wall_clock(self) -> None:
        """A signal without ``nowMs`` runs at the last ``nowMs`` a step gave (else the wall clock); an idle
        without one at the wall clock, as CONTRACT.md says. A script that gives its times is the same any day."""
        script = [
            '{"activate": "worker"}',
            '{"idle": {"nowMs": 5000}}',
            '{"signal": {"type": "blocked"}}',  # at 5000, the script's clock
            '{"idle": {"nowMs": 125000}}',
            '{"idle": {"nowMs": 125001}}',
        ]
        for wall_clock_s in (1_700_000_000.0, 1_799_999_990.0):
            continued = [
                r["continued"] if isinstance(r, dict) else None for r in _results(script, wall_clock_s)
            ]
            assert continued == [None, True, None, False, True]  # active, then blocked at 5000 for 2 min
        on_the_wall = ['{"activate": "worker"}', '{"signal": {"type": "blocked"}}', '{"idle": {}}']
        assert (
            _results(on_the_wall, 1_700_000_000.0)[2]["continued"] is False
        )  # both at the wall clock: 0 s apart
        late = ['{"activate": "worker"}', '{"signal": {"type": "blocked", "nowMs": 0}}', '{"idle": {}}']
        assert _results(late, 1_700_000_000.0)[2]["continued"] is True  # idle at the wall clock, long after 0

    @pytest.mark.parametrize("now", ["-1", "1e30", "true", '"5"', "1.5", "9007199254740993"])
    def test_signal_now_ms_is_checked_like_idles(self, now: str) -> None:
        """``signal.nowMs`` is bounded as ``idle.nowMs`` is, and a bad one is that line's error naming the field;
        nothing is recorded for it."""
        script = ['{"activate": "worker"}', f'{{"signal": {{"type": "answer", "nowMs": {now}}}}}']
        outputs = list(run_script(_worker(), script))
        error = outputs[1][1]
        assert error is not None and error.startswith(
            "line 2: signal.nowMs: must be an integer (Unix ms) from 0 to "
        )
        assert outputs[1][0]["functions"]["worker"]["ledger"] == {}


class TestGuardInTheScript:
    @pytest.mark.parametrize(
        ("body", "spelled"),
        [("{}", "undefined"), ('{"type": null}', "null"), ('{"type": true}', "true"), ('{"type": 2.0}', "2")],
    )
    def test_the_guard_message_spells_the_type_as_javascript(self, body: str, spelled: str) -> None:
        """An audit (finding 7): the result said "None" and "True"; it is rolebox's message with the JS value, the
        script goes on, and no Python spelling reaches the ledger (``signal_observed(None)`` stays false)."""
        script = ['{"activate": "worker"}', f'{{"signal": {body}}}', '{"signal": {"type": "progress"}}']
        outputs = list(run_script(_worker(), script))
        assert outputs[1][1] is None
        assert outputs[1][0]["result"] == (
            f'Unrecognized signal type: "{spelled}". Valid types: answer, revise_needed, escalate, need_approval, '
            "blocked, need_clarification, handoff, progress"
        )
        assert outputs[2][0]["functions"]["worker"]["ledger"] == {"progress": None}


class TestSimulateCommand:
    def test_one_json_line_per_step(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """The command prints six JSON lines for six steps and names each bad line on stderr (field too), exit 1."""
        script = tmp_path / "steps.jsonl"
        script.write_text("\n".join(SCRIPT) + "\n")
        assert main(["functions", "simulate", "--functions", str(FUNCTIONS), "--script", str(script)]) == 1
        out, err = capsys.readouterr()
        rows = [_strict(line) for line in out.splitlines()]
        assert [row["step"] for row in rows] == [0, 1, 2, 3, 4, 5]
        assert rows[1]["result"]["error"].startswith("signal.payload.x is NaN")
        assert rows[2]["result"]["error"].startswith("set.value.0 is Infinity")
        assert err.splitlines()[0].startswith("line 2: signal.payload.x is NaN")
        assert "line 4: nested deeper than 64 levels" in err and "line 5:" in err
        assert "Traceback" not in err

    def test_a_blank_line_gets_its_output_line(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Three input lines, the middle one blank (CRLF endings too), print three JSON lines numbered 0-2; the
        blank one is named on stderr and the command exits 1."""
        script = tmp_path / "steps.jsonl"
        script.write_bytes(b'{"activate": "approval"}\r\n\r\n{"turn": {"userMessaged": false}}\r\n')
        assert main(["functions", "simulate", "--functions", str(FUNCTIONS), "--script", str(script)]) == 1
        out, err = capsys.readouterr()
        rows = [_strict(line) for line in out.splitlines()]
        assert [row["step"] for row in rows] == [0, 1, 2]
        assert rows[1]["result"] == {"error": BLANK_LINE}
        assert err.splitlines() == [f"line 2: {BLANK_LINE}"]
