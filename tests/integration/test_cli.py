"""`agent-signal enqueue / inspect / dlq / status` as a user runs them (real processes, real Redis)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, settings_env, wait_for

pytestmark = pytest.mark.integration


def _cli(settings: Any, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "producers._cli", *args],
        cwd=ROOT,
        env=settings_env(settings),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


GOOD = '{"sourceType":"bot.message.merged","sourceId":"%s","payload":{"topicId":"t1","message":"hi"}}'


class TestEnqueue:
    def test_summary_and_rejections_name_line_and_field(self, make_settings: Any, tmp_path: Path) -> None:
        """Valid lines are enqueued; each bad line is reported with its number and field; exit 1; summary last."""
        settings = make_settings()
        path = _write(
            tmp_path / "events.jsonl",
            [
                GOOD % "m1",
                GOOD % "m2",
                GOOD % "m1",
                '{"sourceType":"bot.message.merged","payload":{}}',
                "{not json",
                "",
                '{"sourceType":"nope.nope","sourceId":"x","payload":{}}',
            ],
        )
        result = _cli(settings, "enqueue", str(path))
        assert result.returncode == 1
        assert json.loads(result.stdout.strip().splitlines()[-1]) == {
            "accepted": 2,
            "duplicate": 1,
            "rejected": 3,
        }
        assert "line 4: sourceId is required (field: sourceId)" in result.stderr
        assert "line 5: not valid JSON" in result.stderr
        assert "line 7: sourceType: unknown source type 'nope.nope'" in result.stderr
        assert "Traceback" not in result.stderr

    def test_clean_file_exits_zero(self, make_settings: Any, tmp_path: Path) -> None:
        """All lines valid: exit 0 and no progress bar when stderr is not a terminal."""
        settings = make_settings()
        result = _cli(settings, "enqueue", str(_write(tmp_path / "e.jsonl", [GOOD % "a", GOOD % "b"])))
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == {"accepted": 2, "duplicate": 0, "rejected": 0}
        assert "[" not in result.stderr

    def test_over_http(self, make_settings: Any, start_web: Any, tmp_path: Path) -> None:
        """--url sends through POST /v1/events; a bad line is rejected alone, with its line and field."""
        settings = make_settings(api_token="tok")
        _, url = start_web(settings)
        path = _write(
            tmp_path / "e.jsonl",
            [GOOD % "h1", '{"sourceType":"bot.message.merged","sourceId":"h2"}', GOOD % "h3", GOOD % "h1"],
        )
        result = _cli(settings, "enqueue", str(path), "--url", url)
        assert result.returncode == 1
        assert json.loads(result.stdout.strip().splitlines()[-1]) == {
            "accepted": 2,
            "duplicate": 1,
            "rejected": 1,
        }
        assert "line 2: payload is required (field: payload)" in result.stderr

    def test_missing_file(self, make_settings: Any) -> None:
        """A missing file is a one-line error, exit 2."""
        result = _cli(make_settings(), "enqueue", "/nonexistent.jsonl")
        assert result.returncode == 2
        assert (
            result.stderr.strip()
            == "agent-signal enqueue: cannot read /nonexistent.jsonl: No such file or directory"
        )


class TestOperate:
    def test_inspect_status_and_dlq(self, make_settings: Any, start_worker: Any, tmp_path: Path) -> None:
        """A processed chain prints in five steps; a dead event is listed and can be redriven."""
        settings = make_settings(max_attempts=1)
        start_worker(settings)
        bad = '{"sourceType":"tool.outcome.failed","sourceId":"to-9","payload":{"topicId":"t1","tool":{"identifier":"x"},"outcome":{}}}'
        result = _cli(settings, "enqueue", str(_write(tmp_path / "e.jsonl", [GOOD % "m1", bad])))
        assert result.returncode == 0, result.stderr

        def dead_listed() -> Any:
            out = _cli(settings, "dlq", "list", "--json")
            return json.loads(out.stdout)["events"] if out.returncode == 0 else None

        events = wait_for(dead_listed, timeout_s=60, what="the dead letter")
        assert events[0]["event"]["sourceId"] == "to-9"
        assert "payload.outcome.status" in events[0]["error"]
        wait_for(lambda: _cli(settings, "inspect", "chain:m1").returncode == 0, what="the chain")
        text = _cli(settings, "inspect", "chain:m1").stdout
        for heading in ("1. source", "2. signals", "3. actions", "4. results", "5. edges", "dominant path:"):
            assert heading in text
        assert (
            "bot.message.merged -> signal.message.received -> signal.action.applied -> action.activity.record"
            in text
        )
        assert json.loads(_cli(settings, "inspect", "m1", "--json").stdout)["record"]["chainId"] == "chain:m1"
        assert _cli(settings, "inspect", "chain:none").returncode == 1

        human = _cli(settings, "dlq", "list").stdout
        assert "to-9" in human and "attempts=1" in human
        redrive = _cli(settings, "dlq", "redrive", "--all")
        assert json.loads(redrive.stdout)["redriven"] == [events[0]["eventId"]]
        status = json.loads(_cli(settings, "status", events[0]["eventId"]).stdout)
        assert status["eventId"] == events[0]["eventId"]
        assert _cli(settings, "dlq", "redrive").returncode == 2
