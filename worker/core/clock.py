"""The service's clock in Unix milliseconds (what every stored time and every ``*_ms`` field uses): Redis's.

Scripts take their time from the Redis server (``redis_now_ms()``), and the processes used their host's wall clock:
a walk with one host 45 s ahead found retries held 45 s behind another worker's clock, outbox calls first due
10 minutes late, fresh user tokens refused and receipts missing from their own ``sinceCreatedAt``. So a process
whose host clock is off Redis's reads Redis's: worker/store/server/clock_sync.py measures ``TIME`` at the process's first
client and every minute after, and :func:`set_measured` keeps Redis's time as an offset to this process's
*monotonic* clock, which no step of the host's wall clock moves (an offset to the wall clock would turn an NTP step
of the host into a skew until the next measure). A host within :data:`OFFSET_DEADBAND_MS` of Redis reads its own
wall clock, exactly as before: a healthy fleet stamps what it did. No I/O here: the measures are given from outside.
"""

from __future__ import annotations

import time

__all__ = [
    "JITTER_MS",
    "OFFSET_BACK_MS",
    "OFFSET_DEADBAND_MS",
    "clock_offset_ms",
    "host_ms",
    "now_ms",
    "now_us",
    "on_own_clock",
    "set_measured",
]

OFFSET_DEADBAND_MS = 50  # a host's wall clock this close to Redis's is read as it is
OFFSET_BACK_MS = 25  # once on Redis's clock, a host goes back to its own only this close (no flapping at 50)
JITTER_MS = 20  # a re-measure this close to the offset in use keeps it (no step of a round trip's noise)

_mono_offset_us: int | None = (
    None  # Redis's clock minus this process's monotonic one; None: the host's is right
)


def now_ms() -> int:
    """Now on the service's clock (Redis's), in Unix milliseconds."""
    offset = _mono_offset_us
    if offset is None:
        return int(time.time() * 1000)
    return (time.monotonic_ns() // 1000 + offset) // 1000


def now_us() -> int:
    """Now on the service's clock, in Unix microseconds."""
    offset = _mono_offset_us
    if offset is None:
        return time.time_ns() // 1000
    return time.monotonic_ns() // 1000 + offset


def host_ms() -> int:
    """This host's own wall clock, for what only this host reads (a heartbeat file's age, read by a probe that
    may not reach Redis)."""
    return int(time.time() * 1000)


def on_own_clock() -> bool:
    """Whether this process reads its host's wall clock (it is within the dead band of Redis's, or not measured)."""
    return _mono_offset_us is None


def clock_offset_ms() -> int:
    """How far the service's clock is from this host's wall clock now (0 on its own clock)."""
    return 0 if _mono_offset_us is None else now_ms() - host_ms()


def set_measured(redis_us: int, wall_us: int, mono_us: int, *, uncertainty_us: int = 0) -> int:
    """Take one measure (Redis's clock, this host's wall and monotonic clocks, each in µs at the same instant, give
    or take ``uncertainty_us``: half the round trip that read Redis's). The host's wall clock is read as it is
    unless it is off Redis's by :data:`OFFSET_DEADBAND_MS` even at the measure's most favourable reading, else
    Redis's through the monotonic clock (kept when within :data:`JITTER_MS`, plus the uncertainty, of the offset in
    use). A CI run found why the uncertainty counts: a first ``TIME`` that waited 120 ms for its connection on a
    loaded machine read a host on the same clock as 60 ms off, and put the process 60 ms ahead of its workers.
    Returns the wall clock's offset in ms (Redis minus host)."""
    global _mono_offset_us
    wall_offset_ms = round((redis_us - wall_us) / 1000)
    slack_ms = uncertainty_us / 1000
    if _mono_offset_us is None:
        if abs(wall_offset_ms) - slack_ms < OFFSET_DEADBAND_MS:
            return wall_offset_ms
    elif abs(wall_offset_ms) + slack_ms < OFFSET_BACK_MS:
        _mono_offset_us = None
        return wall_offset_ms
    measured = redis_us - mono_us
    current = _mono_offset_us
    if current is None or abs(measured - current) >= JITTER_MS * 1000 + uncertainty_us:
        _mono_offset_us = measured
    return wall_offset_ms
