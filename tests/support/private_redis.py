"""A private ``redis-server`` on a free loopback port, for tests that fill or misconfigure their Redis (never
the shared one): ``with private_redis(tmp_path, "--maxmemory-policy", "allkeys-lru") as url: ...``."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from tests.conftest import free_port, wait_for

__all__ = ["private_redis"]


@contextmanager
def private_redis(directory: Path, *config: str) -> Iterator[str]:
    """Start ``redis-server`` (no persistence unless ``config`` says so) and yield its URL; stop it after."""
    port = free_port()
    log_path = directory / f"redis-{port}.log"
    args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory)]
    args += ["--save", "", "--appendonly", "no", *config]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    url = f"redis://127.0.0.1:{port}/0"
    client = Redis.from_url(url)

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError("redis-server exited:\n" + log_path.read_text(errors="replace"))
        try:
            return bool(client.ping())
        except RedisConnectionError:
            return False

    try:
        wait_for(up, timeout_s=20, what="the private redis-server")
        yield url
    finally:
        client.close()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
