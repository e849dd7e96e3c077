"""A server that sends its answer one byte at a time never trips a read timeout: every HTTP call of the CLI
(the console verbs, ``status``, ``inspect``, ``dlq``, ``keys``, ``probe web``) ends at its whole-answer deadline
with one line, ``no answer from URL within N s`` (producers/cli/reach/target.py, worker/outbox/deadline.py).

Each verb runs as its own process with a 1 s deadline and a subprocess timeout far above it, so a verb that
hangs fails its test rather than the run."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT

# the CLI with its HTTP deadline at 1 s instead of 30 s (Api reads HTTP_TIMEOUT_S when it is made)
SHORT_DEADLINE = (
    "import sys\n"
    "from producers.cli.reach import target\n"
    "target.HTTP_TIMEOUT_S = 1.0\n"
    "from producers.cli.main import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)
HANG_S = 30  # a verb still running after this hangs: the deadline is 1 s
PROXIES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


def _env(**extra: str) -> dict[str, str]:
    """This environment without a target, credential or proxy of its own."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("AGENT_SIGNAL_") and k not in ("REDIS_URL", "BROKER_URL", *PROXIES)
    }
    return {**clean, "PYTHONPATH": str(ROOT), **extra}


def _run(argv: list[str], **env: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    try:
        result = subprocess.run(
            argv, cwd="/", env=_env(**env), capture_output=True, text=True, timeout=HANG_S
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{argv[3:]} still waiting after {HANG_S} s for an answer trickled a byte at a time")
    return result, time.monotonic() - started


@pytest.mark.parametrize(
    ("verb", "name"),
    [
        (["status", "evt_x"], "status"),
        (["inspect", "c1"], "inspect"),
        (["dlq", "list"], "dlq list"),
        (["dlq", "redrive", "--all"], "dlq redrive"),
        (["keys", "list"], "keys list"),
        (["runs", "list"], "runs list"),
        (["outbox", "dead"], "outbox dead"),
    ],
)
def test_a_trickled_answer_ends_at_the_deadline(trickle: int, verb: list[str], name: str) -> None:
    """One line on stderr, ``no answer from URL within 1 s``, exit 2, well before the process is given up on."""
    url = f"http://127.0.0.1:{trickle}"
    result, _ = _run([sys.executable, "-c", SHORT_DEADLINE, *verb, "--url", url])
    assert (result.returncode, result.stderr) == (
        2,
        f"agent-signal {name}: no answer from {url} within 1 s\n",
    )
    assert result.stdout == ""  # (the trickle never ends: only the deadline could have ended the verb)


def test_probe_web_ends_at_its_timeout(trickle: int) -> None:
    """``probe web --timeout-s 1`` against a /readyz that trickles: the same line, exit 1 (not ready)."""
    argv = [sys.executable, "-m", "producers.cli", "probe", "web", "--timeout-s", "1"]
    result, _ = _run(argv, PORT=str(trickle), AGENT_SIGNAL_HOST="127.0.0.1")
    url = f"http://127.0.0.1:{trickle}/readyz"
    assert (result.returncode, result.stderr) == (1, f"no answer from {url} within 1 s\n")
