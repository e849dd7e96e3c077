"""The per-test CPU table (tests/support/cpu_per_test.py) sums a file's tests and ranks files by CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cpu_per_test import main, summary


def _row(test_id: str, self_s: float, children_s: float, wall_s: float = 1.0) -> dict[str, object]:
    return {"id": test_id, "self_s": self_s, "children_s": children_s, "wall_s": wall_s}


def test_files_are_summed_and_ranked_by_cpu() -> None:
    rows = [
        _row("tests/a.py::test_one", 1.0, 2.0),
        _row("tests/b.py::TestX::test_two[p]", 0.5, 9.0, wall_s=4.0),
        _row("tests/a.py::test_three", 1.0, 0.0),
    ]
    lines = summary(rows, top=5)
    assert lines[0] == "3 tests: 14 s CPU (2 s pytest, 11 s children)"
    assert lines[2].split() == ["10", "0", "9", "4", "1", "tests/b.py"]
    assert lines[3].split() == ["4", "2", "2", "2", "2", "tests/a.py"]
    assert summary(rows, top=1)[2:] == [lines[2]]


def test_the_command_reads_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "cpu.jsonl"
    report.write_text(json.dumps(_row("tests/c.py::test_x", 0.25, 0.75)) + "\n\n")
    assert main([str(report)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "1 tests: 1 s CPU (0 s pytest, 1 s children)"
    assert out[2].endswith("tests/c.py")
