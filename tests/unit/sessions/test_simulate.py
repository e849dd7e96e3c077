"""``functions simulate`` (sessions/simulate.py, producers/cli/functions.py): one JSON line per step, whatever a
line holds: ``NaN`` or ``Infinity`` (not JSON) and nesting too deep are that line's error, and the lines after it
still run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from producers.cli.main import main
from sessions.fsm import FunctionMachine
from sessions.functions import parse_function_file
from sessions.simulate import run_script
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
