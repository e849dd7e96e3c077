"""A private ``redis-server`` on a free loopback port, for tests that fill or misconfigure their Redis (never
the shared one): ``with private_redis(tmp_path, "--maxmemory-policy", "allkeys-lru") as url: ...``."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse
from redis.exceptions import TimeoutError as RedisTimeoutError

from tests.conftest import free_port, wait_for

__all__ = ["private_redis"]


PORT_TRIES = 3


@contextmanager
def private_redis(directory: Path, *config: str) -> Iterator[str]:
    """Start ``redis-server`` (no persistence unless ``config`` says so) and yield its URL; stop it after. Under
    xdist another test's server can take the port between :func:`free_port` and the bind: the loser exits with
    "Address already in use" (then another port is tried), and a server counts as up only once it answers with
    its own process id, never because the winner answered on the port."""
    for _ in range(PORT_TRIES):
        port = free_port()
        log_path = directory / f"redis-{port}.log"
        args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory)]
        args += ["--save", "", "--appendonly", "no", *config]
        with log_path.open("wb") as log:
            proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        url = f"redis://127.0.0.1:{port}/0"
        # short timeouts: until our server has exited, whoever holds the port answers, and it may be a web app or a
        # listener that never answers
        client = Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
        try:
            found = wait_for(
                partial(_up, proc, client, log_path), timeout_s=20, what="the private redis-server"
            )
            if found == "ours":
                break
        except BaseException:
            _stop(proc)
            raise
        finally:
            client.close()
    else:
        raise AssertionError(f"the private redis-server lost its port {PORT_TRIES} times in a row")
    try:
        yield url
    finally:
        _stop(proc)


def _up(proc: subprocess.Popen[bytes], client: Redis, log_path: Path) -> str | bool:
    """ "ours" once the server at the port says it is ``proc``, "taken" when ``proc`` exited because another
    process holds the port; False while neither."""
    if proc.poll() is not None:
        log = log_path.read_text(errors="replace")
        if "address already in use" in log.lower():
            return "taken"
        raise AssertionError("redis-server exited:\n" + log)
    try:
        return "ours" if int(client.info("server")["process_id"]) == proc.pid else False
    # not ours (yet), whoever answers or does not: the next poll() tells
    except (RedisConnectionError, RedisTimeoutError, InvalidResponse):
        return False


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
