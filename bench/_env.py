"""Bench plumbing: a Redis (REDIS_URL or embedded), settings with a private prefix, worker processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from redis import Redis

from worker.settings import Settings, settings_environment

ROOT = Path(__file__).resolve().parent.parent


@contextmanager
def redis_url() -> Iterator[str]:
    url = os.environ.get("REDIS_URL")
    if url:
        yield url
        return
    with private_redis_url() as embedded:
        yield embedded


@contextmanager
def private_redis_url() -> Iterator[str]:
    """An embedded Redis of our own even when REDIS_URL is set: for measurements (memory) that another
    writer on the same server would falsify."""
    from worker.runtime.embedded import start_embedded_redis

    server = start_embedded_redis()
    try:
        yield server.url
    finally:
        server.stop()


def make_settings(url: str, **overrides: Any) -> Settings:
    prefix = f"bench-{uuid.uuid4().hex[:8]}:"
    values: dict[str, Any] = {
        "redis_url": url,
        "key_prefix": prefix,
        "queue_name": prefix.rstrip(":"),
        "env": "test",
    }
    values.update(overrides)
    return Settings(**values)


def env_for(settings: Settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_SIGNAL_")}
    env.update(settings_environment(settings))
    env["PYTHONPATH"] = str(ROOT)
    return env


def wait(predicate: Callable[[], Any], timeout_s: float, interval_s: float = 0.01) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark step timed out")
        time.sleep(interval_s)


@contextmanager
def workers(settings: Settings, count: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` worker processes with one child each (so "2 worker processes" means two executing processes)."""
    client = Redis.from_url(settings.require_redis_url(), decode_responses=True)
    key = f"{settings.key_prefix}workers"
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "producers.cli", "worker", "--concurrency", "1", "--loglevel", "WARNING"],
            cwd=ROOT,
            env=env_for(settings),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(count)
    ]
    try:
        wait(lambda: client.hlen(key) >= count, timeout_s=60, interval_s=0.1)
        yield procs
    finally:
        stop_processes(procs)
        cleanup(client, settings.key_prefix)
        client.close()


def stop_processes(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM all of them at once, then wait for each (SIGKILL after 20 s)."""
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()


def cleanup(client: Redis, prefix: str) -> None:
    keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
    for i in range(0, len(keys), 500):
        client.delete(*keys[i : i + 500])


def peak_rss_kib(pids: list[int]) -> int:
    """Peak resident set (VmHWM) over the given processes and their children."""
    total = 0
    for pid in pids:
        candidates = [pid]
        try:
            candidates += [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        except OSError:
            pass
        for c in candidates:
            try:
                for line in Path(f"/proc/{c}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        total = max(total, int(line.split()[1]))
            except OSError:
                continue
    return total


@contextmanager
def web(settings: Settings) -> Iterator[str]:
    """One ``agent-signal web`` process on a free port; yields its base URL."""
    import socket

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    settings = settings.model_copy(update={"port": port})
    proc = subprocess.Popen(
        [sys.executable, "-m", "producers.cli", "web"],
        cwd=ROOT,
        env=env_for(settings),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(url + "/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait(up, timeout_s=60, interval_s=0.1)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        client = Redis.from_url(settings.require_redis_url(), decode_responses=True)
        cleanup(client, settings.key_prefix)
        client.close()
