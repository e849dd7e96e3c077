"""Celery's own tools see our workers: a real ``agent-signal worker`` and a real Flower
(``celery -A worker.runtime.celery_app flower``, the dev extra) on the test's Redis and key prefix.

Flower learns about workers and tasks from Celery's events (heartbeats, task-received/started/succeeded) on
the broker's event channel, and reads queue lengths from the broker's lists; all of those live under our
``global_keyprefix``, which Flower takes from the app's ``broker_transport_options``. Every wait is on the
content of Flower's HTTP API, bounded.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from producers import Producer
from tests.conftest import ROOT, Proc, free_port, settings_env, wait_for, worker_argv
from worker.runtime.tasks import NOOP_TASK
from worker.settings import Settings

pytestmark = pytest.mark.integration

DRAIN_TASKS = ("agent_signal.drain", "agent_signal.drain_next")


class Flower:
    """A running Flower and a client for its API (basic auth, as Flower should be run)."""

    def __init__(self, proc: Proc, url: str, auth: tuple[str, str]) -> None:
        self.proc, self.url, self.auth = proc, url, auth

    def get(self, path: str, **params: Any) -> Any:
        if self.proc.popen.poll() is not None:
            raise AssertionError("flower exited:\n" + self.proc.log())
        try:
            response = httpx.get(self.url + path, params=params, auth=self.auth, timeout=10)
        except httpx.TransportError:
            return None
        return response.json() if response.status_code == 200 else None


@pytest.fixture
def start_flower(tmp_path: Path) -> Iterator[Callable[[Settings], Flower]]:
    """Factory: ``celery -A worker.runtime.celery_app flower`` with the test's settings in its environment."""
    procs: list[Proc] = []

    def start(settings: Settings) -> Flower:
        port, auth = free_port(), ("ops", uuid.uuid4().hex)
        log_path = tmp_path / f"flower-{len(procs)}.log"
        argv = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "worker.runtime.celery_app",
            "flower",
            f"--broker={settings.effective_broker_url()}",
            "--address=127.0.0.1",
            f"--port={port}",
            f"--basic-auth={auth[0]}:{auth[1]}",
        ]
        popen = subprocess.Popen(
            argv, cwd=ROOT, env=settings_env(settings), stdout=log_path.open("wb"), stderr=subprocess.STDOUT
        )
        proc = Proc(popen, log_path)
        procs.append(proc)
        flower = Flower(proc, f"http://127.0.0.1:{port}", auth)
        wait_for(lambda: flower.get("/api/workers") is not None, timeout_s=60, what="flower's API")
        return flower

    yield start
    for proc in procs:
        proc.stop()


def _events(n: int) -> list[dict[str, Any]]:
    return [
        {"sourceType": "test.timeline", "sourceId": f"fl-{i}", "scopeKey": f"topic:fl-{i % 3}", "payload": {}}
        for i in range(n)
    ]


def test_flower_sees_the_queue_the_worker_and_its_tasks(
    make_settings: Any,
    start_worker: Any,
    start_flower: Callable[[Settings], Flower],
    request: pytest.FixtureRequest,
) -> None:
    """Messages waiting in our (prefixed) queue show in Flower's queue lengths; once a worker runs, Flower
    lists it alive with its pool and our queue, and lists the drain tasks it ran as SUCCESS on that worker."""
    settings = make_settings(task_events=True)  # Flower lists tasks from task events (off by default)
    flower = start_flower(settings)
    producer = Producer(settings)
    request.addfinalizer(producer.close)
    # Given three messages in the queue and no worker yet
    for _ in range(3):
        producer.app.send_task(NOOP_TASK, queue=settings.queue_name)

    def queued() -> int:
        lengths = flower.get("/api/queues/length") or {"active_queues": []}
        return sum(q["messages"] for q in lengths["active_queues"] if q["name"] == settings.queue_name)

    # Then Flower counts them (it reads the broker's lists under global_keyprefix)
    wait_for(lambda: queued() == 3, timeout_s=60, what="flower to count 3 queued messages")

    # When a worker starts, Flower sees it alive (its heartbeats reach Flower's event receiver)
    worker = start_worker(settings, concurrency=2)
    hostname = worker.hostname_hint
    wait_for(lambda: (flower.get("/api/workers", status=1) or {}).get(hostname), timeout_s=60, what="alive")
    # and, on inspect (a broadcast and replies through the prefixed broker), its pool and our queue
    info = wait_for(
        lambda: (flower.get("/api/workers", refresh=1) or {}).get(hostname), timeout_s=60, what="inspect"
    )
    assert info["stats"]["pool"]["max-concurrency"] == 2
    assert [q["name"] for q in info["active_queues"]] == [settings.queue_name]

    # When events are enqueued, Flower lists the drain tasks (from task events) as SUCCESS on that worker
    results = producer.enqueue_many(_events(6))
    assert [r.status for r in results] == ["accepted"] * 6

    def drains() -> dict[str, Any]:
        tasks = flower.get("/api/tasks", limit=500) or {}
        return {
            task_id: task
            for task_id, task in tasks.items()
            if task["name"] in DRAIN_TASKS and task["state"] == "SUCCESS" and task["worker"] == hostname
        }

    done = wait_for(drains, timeout_s=60, what="flower to list drain tasks as SUCCESS")
    assert all(t["received"] and t["started"] and t["succeeded"] for t in done.values())
    # And the queue it counted is empty again
    wait_for(lambda: queued() == 0, timeout_s=60, what="the queue to empty in flower's view")


def _celery(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "celery", "-A", "worker.runtime.celery_app", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_worker_flags_pass_through_and_celery_tools_find_the_worker(
    make_settings: Any,
    redis_client: Any,
    keys: Any,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    run_pid: int,
) -> None:
    """``agent-signal worker -- --concurrency 3 -n NAME@%h`` starts a worker with those flags;
    ``celery -A worker.runtime.celery_app inspect`` finds it with the environment's settings, or, with REDIS_URL unset,
    through the running ``make run`` stack file (its Redis, key prefix and queue); with neither it fails in one line
    naming REDIS_URL."""
    settings = make_settings()
    env = settings_env(settings)
    name = f"flags-{uuid.uuid4().hex[:8]}"
    argv = [*worker_argv(1), "--", "--concurrency", "3", "-n", f"{name}@%h"]
    log_path = tmp_path / "worker.log"
    proc = Proc(
        subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log_path.open("wb"), stderr=subprocess.STDOUT),
        log_path,
    )
    request.addfinalizer(proc.stop)

    def registered() -> str | None:
        if proc.popen.poll() is not None:
            raise AssertionError("worker exited:\n" + proc.log())
        return next((h for h in redis_client.hkeys(keys.workers) if h.startswith(name + "@")), None)

    hostname = wait_for(registered, timeout_s=60, what="the worker to register")

    stats = _celery(["inspect", "stats", "--json", "--timeout", "10", "-d", hostname], env, ROOT)
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)[hostname]["pool"]["max-concurrency"] == 3

    # a second terminal: no Redis, prefix or queue of its own; the stack file names the worker's (a make run stack
    # with AGENT_SIGNAL_KEY_PREFIX and AGENT_SIGNAL_QUEUE_NAME set), whose `run` process is alive
    own = ("REDIS_URL", "BROKER_URL", "AGENT_SIGNAL_KEY_PREFIX", "AGENT_SIGNAL_QUEUE_NAME")
    without_url = {k: v for k, v in env.items() if k not in own}
    stack_dir = tmp_path / "checkout"
    (stack_dir / ".agent-signal").mkdir(parents=True)
    stack = {
        "version": 1,
        "pid": run_pid,
        "url": "http://127.0.0.1:1",
        "redisUrl": settings.redis_url,
        "keyPrefix": settings.key_prefix,
        "queueName": settings.queue_name,
    }
    (stack_dir / ".agent-signal" / "stack.json").write_text(json.dumps(stack))
    ping = _celery(["inspect", "ping", "--timeout", "10", "-d", hostname], without_url, stack_dir)
    assert ping.returncode == 0 and "pong" in ping.stdout, ping.stdout + ping.stderr

    (tmp_path / "elsewhere").mkdir()
    lost = _celery(["inspect", "ping"], without_url, tmp_path / "elsewhere")
    assert lost.returncode == 2
    assert "REDIS_URL is not set" in lost.stderr and "Traceback" not in lost.stderr, lost.stderr
