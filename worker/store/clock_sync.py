"""Each process keeps its clock on Redis's (worker/core/clock.py): the offset measured with ``TIME`` when the
process makes its first store client (:func:`keep_in_sync`, called by the client factories) and every
:data:`RESYNC_S` after, on a daemon thread of each process (a forked pool child starts its own). The first measure
is made at once with a short timeout, so a one-shot CLI verb writes on Redis's clock too; a Redis not reachable
then leaves the offset as it is, and the thread tries again (no thread under ``AGENT_SIGNAL_ENV=test``: a test that
freezes ``time.time`` would set every later test's offset). A host more than :data:`WARN_OFFSET_MS` off is logged
(its clock is wrong: fix NTP; the service works on Redis's meanwhile).

Hand-written: a dozen lines around one ``TIME`` call; NTP clients sync a host, not a process to a server's clock.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from redis import Redis, RedisError

from worker.core.clock import clock_offset_ms, set_clock_offset_ms
from worker.settings import Settings

__all__ = ["RESYNC_S", "WARN_OFFSET_MS", "keep_in_sync", "measure_offset_ms"]

RESYNC_S = 60.0
WARN_OFFSET_MS = 1_000
MEASURE_TIMEOUT_S = 1.0
log = logging.getLogger(__name__)

_started_in: int | None = None  # the pid whose thread runs (a forked child starts its own)
_lock = threading.Lock()


def measure_offset_ms(client: Redis) -> int:
    """Redis's clock minus this host's, in ms, read at the middle of one ``TIME`` round trip."""
    before = time.time()
    seconds, micros = client.time()
    after = time.time()
    return round(int(seconds) * 1000 + int(micros) / 1000 - (before + after) * 500)


def keep_in_sync(settings: Settings) -> None:
    """Measure now (best effort) and keep measuring every :data:`RESYNC_S` in this process: once per process."""
    global _started_in
    with _lock:
        if _started_in == os.getpid():
            return
        _started_in = os.getpid()
    _sync_once(settings)
    if settings.env != "test":  # a test freezing time.time must not set another test's offset a minute on
        threading.Thread(target=_loop, args=(settings,), name="clock-sync", daemon=True).start()


def _loop(settings: Settings) -> None:
    while True:
        time.sleep(RESYNC_S)
        _sync_once(settings)


def _sync_once(settings: Settings) -> None:
    client = _short_client(settings)
    try:
        offset = set_clock_offset_ms(measure_offset_ms(client))
    except (RedisError, OSError):
        log.debug("clock: Redis's clock not read; the offset stays %d ms", clock_offset_ms(), exc_info=True)
        return
    finally:
        client.close()
    if abs(offset) >= WARN_OFFSET_MS:
        log.warning(
            "clock: this host's clock is %d ms off the Redis server's; the service uses Redis's. Sync the hosts' "
            "clocks (NTP): see docs/operations.md, Clocks",
            -offset,
            extra={"clockOffsetMs": offset},
        )


def _short_client(settings: Settings) -> Redis:
    """A client of its own for one ``TIME`` (a node of the cluster is enough: its clock is what its scripts read)."""
    url = settings.redis_cluster_url or settings.require_redis_url()
    timeout = MEASURE_TIMEOUT_S
    return Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
