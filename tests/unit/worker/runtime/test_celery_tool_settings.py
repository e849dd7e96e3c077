"""Celery's own tools (``celery -A worker.runtime.celery_app inspect ping``, Flower) run with the settings
``agent-signal worker`` runs with in the same terminal: with no Redis named, the ``make run`` stack of the checkout
is joined as the worker joins it (worker/runtime/stack_file.py), its Redis, key prefix and queue; settings no app
can be built from end the tool with one line, exit 2, not Celery's traceback of an app that failed to load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from worker.runtime import celery_app
from worker.runtime.celery_app import load_tool_settings
from worker.runtime.stack_file import STACK_FILE, StackInfo

EMBEDDED = "unix:///tmp/tmpab12/redis.socket"
NAMES = ("REDIS_URL", "BROKER_URL", "REDIS_CLUSTER_URL", "KEY_PREFIX", "QUEUE_NAME")


@pytest.fixture(autouse=True)
def second_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """None of the variables that name a Redis, a broker, a prefix or a queue."""
    for name in NAMES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(f"AGENT_SIGNAL_{name}", raising=False)


def _checkout(root: Path, info: StackInfo) -> Path:
    """A checkout (``pyproject.toml``) with ``info`` as its stack file; returns a directory inside it."""
    (root / "pyproject.toml").write_text("")
    (root / STACK_FILE).parent.mkdir(parents=True)
    (root / STACK_FILE).write_text(json.dumps(info.to_json()))
    (root / "sub").mkdir()
    return root / "sub"


def test_a_tool_joins_the_stack_with_its_prefix_and_queue(tmp_path: Path, run_pid: int) -> None:
    """An audit: a stack run with its own prefix and queue, and the tool took only its Redis (``inspect ping``:
    "No nodes replied"). It now takes the stack's prefix and queue too, from any directory of the checkout."""
    stack = StackInfo(
        pid=run_pid, url="http://127.0.0.1:1", redis_url=EMBEDDED, key_prefix="c:", queue_name="cq"
    )
    settings = load_tool_settings(_checkout(tmp_path, stack))
    assert (settings.redis_url, settings.key_prefix, settings.queue_name) == (EMBEDDED, "c:", "cq")


def test_names_set_here_win(tmp_path: Path, run_pid: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """``AGENT_SIGNAL_QUEUE_NAME`` of this terminal is kept, as the worker keeps it."""
    monkeypatch.setenv("AGENT_SIGNAL_QUEUE_NAME", "mine")
    stack = StackInfo(
        pid=run_pid, url="http://127.0.0.1:1", redis_url=EMBEDDED, key_prefix="c:", queue_name="cq"
    )
    settings = load_tool_settings(_checkout(tmp_path, stack))
    assert (settings.key_prefix, settings.queue_name) == ("c:", "mine")


@pytest.mark.parametrize(
    ("stack_here", "line"),
    [
        (True, "runs on a Redis of its own, which its stack file does not record"),
        (False, "REDIS_URL is not set and no `make run` stack is running here"),
    ],
    ids=["stack-on-its-own-redis", "no-stack"],
)
def test_settings_without_an_app_are_one_line_and_exit_2(
    tmp_path: Path,
    run_pid: int,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    stack_here: bool,
    line: str,
) -> None:
    """A stack on a Redis of its own (its file records no URL) was told "no make run stack is running here", and
    either case printed Celery's traceback: now one line saying what to set, exit 2."""
    if stack_here:  # run with REDIS_URL set: its file records no Redis
        monkeypatch.chdir(_checkout(tmp_path, StackInfo(pid=run_pid, url="http://127.0.0.1:1")))
    else:
        (tmp_path / "pyproject.toml").write_text("")
        monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stopped:
        celery_app.__getattr__("app")
    assert stopped.value.code == 2
    (said,) = capsys.readouterr().err.splitlines()
    assert said.startswith("celery -A worker.runtime.celery_app: ") and line in said
    assert "set REDIS_URL" in said
