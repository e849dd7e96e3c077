"""What a CLI command imports before it runs: not the web framework. Every ``agent-signal`` call starts a
Python process whose start is mostly imports; FastAPI's (its OpenAPI models above all) was about 165 ms of a
command's 1.1 s, for commands that never serve a request. Only ``agent-signal web`` and ``run`` need it."""

from __future__ import annotations

import subprocess
import sys

# the CLI's modules every command's parser loads, and the ones `route`, `check`/`simulate` and `enqueue` load to run
MODULES = (
    "producers.cli.main",
    "producers.cli.route",
    "producers.cli.functions",
    "producers.cli.enqueue.lines",
    "producers.cli.enqueue",
)


def test_a_cli_command_does_not_import_the_web_framework() -> None:
    """Checked in a fresh interpreter (this test process has imported FastAPI long since), one per module: each
    would otherwise hide what an earlier import pulled in."""
    code = (
        "import importlib, sys\n"
        "for name in sys.argv[1:]:\n"
        "    before = set(sys.modules)\n"
        "    importlib.import_module(name)\n"
        "    web = sorted(m for m in set(sys.modules) - before if m.split('.')[0] in ('fastapi', 'starlette'))\n"
        "    print(name, web)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, *MODULES], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"{name} []" for name in MODULES], result.stdout
