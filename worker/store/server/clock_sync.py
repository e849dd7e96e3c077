"""Each process keeps its clock on Redis's (worker/core/clock.py): one ``TIME`` when the process makes its first
store client (:func:`keep_in_sync`, called by the client factories) and every :data:`RESYNC_S` after, on a daemon
thread of each process (a forked child, a Celery pool child or an app forked after its first client, starts its
own at its next client). The first measure is made at once with a short timeout, so a one-shot CLI verb writes on
Redis's clock too; a Redis not reachable then leaves the clock as it is (logged once at WARNING), and the thread
tries again. No thread under ``AGENT_SIGNAL_ENV=test``: a test that freezes ``time.time`` would set every later
test's clock. A host more than :data:`WARN_OFFSET_MS` off is logged (its clock is wrong: fix NTP; the service works
on Redis's meanwhile).

On a Redis Cluster the measure is of the node ``REDIS_CLUSTER_URL`` names: each script reads the clock of the
primary its slot is on, so the cluster's hosts must agree (NTP), as they must for a failover anyway.

Hand-written: a dozen lines around one ``TIME`` call; NTP clients sync a host, not a process to a server's clock.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from redis import Redis, RedisError

from worker.core.clock import set_measured
from worker.settings import Settings

__all__ = ["RESYNC_S", "WARN_OFFSET_MS", "keep_in_sync", "measure"]

RESYNC_S = 60.0
WARN_OFFSET_MS = 1_000
MEASURE_TIMEOUT_S = 1.0
SAMPLES = 3  # TIME round trips per measure; the shortest is kept
log = logging.getLogger(__name__)

_started_in: int | None = None  # the pid whose thread runs (a forked child starts its own)
_unread_logged = False  # a Redis whose clock could not be read is logged once per process
_lock = threading.Lock()


def measure(client: Redis, samples: int = SAMPLES) -> tuple[int, int, int, int]:
    """(Redis's clock, this host's wall clock, its monotonic clock, the uncertainty), in µs: the host's read at the
    middle of the shortest of ``samples`` ``TIME`` round trips, give or take half of it. The connection is made
    first (a ``PING``): a round trip that also connects is long and lopsided."""
    client.ping()
    best: tuple[int, int, int, int] | None = None
    for _ in range(samples):
        wall0, mono0 = time.time_ns(), time.monotonic_ns()
        seconds, micros = client.time()
        wall1, mono1 = time.time_ns(), time.monotonic_ns()
        half_rtt_us = (mono1 - mono0) // 2000
        if best is None or half_rtt_us < best[3]:
            redis_us = int(seconds) * 1_000_000 + int(micros)
            best = redis_us, (wall0 + wall1) // 2000, (mono0 + mono1) // 2000, half_rtt_us
    assert best is not None, "samples must be at least 1"
    return best


def keep_in_sync(settings: Settings) -> None:
    """Measure now (best effort) and keep measuring every :data:`RESYNC_S` in this process: once per process."""
    global _started_in
    with _lock:
        if _started_in == os.getpid():
            return
        _started_in = os.getpid()
    _sync_once(settings)
    if settings.env != "test":
        threading.Thread(target=_loop, args=(settings,), name="clock-sync", daemon=True).start()


def _loop(settings: Settings) -> None:
    while True:
        time.sleep(RESYNC_S)
        _sync_once(settings)


def _sync_once(settings: Settings) -> None:
    global _unread_logged
    client = _short_client(settings)
    try:
        redis_us, wall_us, mono_us, uncertainty_us = measure(client)
        offset_ms = set_measured(redis_us, wall_us, mono_us, uncertainty_us=uncertainty_us)
    except (RedisError, OSError) as exc:
        if not _unread_logged:
            _unread_logged = True
            log.warning("clock: the Redis server's clock was not read (%s); trying again", type(exc).__name__)
        return
    finally:
        client.close()
    if abs(offset_ms) >= WARN_OFFSET_MS:
        log.warning(
            "clock: this host's clock is %d ms off the Redis server's; the service uses Redis's. Sync the hosts' "
            "clocks (NTP): see docs/operations.md, Clocks",
            -offset_ms,
            extra={"clockOffsetMs": offset_ms},
        )


def _short_client(settings: Settings) -> Redis:
    """A client of its own for one ``TIME``, with a short timeout."""
    url = settings.redis_cluster_url or settings.require_redis_url()
    return Redis.from_url(url, socket_timeout=MEASURE_TIMEOUT_S, socket_connect_timeout=MEASURE_TIMEOUT_S)
