"""The service's clock in Unix milliseconds (what every stored time and every ``*_ms`` field uses): Redis's.

Scripts take their time from the Redis server (``redis_now_ms()``), and the processes used their host's wall clock:
a walk with one host 45 s ahead found retries held 45 s behind another worker's clock, outbox calls first due
10 minutes late, fresh user tokens refused and receipts missing from their own ``sinceCreatedAt``. So a process
reads its host's clock corrected by the offset to Redis's that worker/store/clock_sync.py measures (``TIME``), at
its first client and every minute after. A host within :data:`OFFSET_DEADBAND_MS` of Redis keeps offset 0: a
healthy fleet reads its own clock exactly as before, and a re-measure that moves by a round trip's jitter changes
nothing. No I/O here: the offset is set from outside.
"""

from __future__ import annotations

import time

__all__ = ["OFFSET_DEADBAND_MS", "clock_offset_ms", "now_ms", "now_us", "set_clock_offset_ms"]

OFFSET_DEADBAND_MS = 50  # a host's clock this close to Redis's is left as it is

_offset_ms = 0


def now_ms() -> int:
    """Now on the service's clock (Redis's), in Unix milliseconds."""
    return int(time.time() * 1000) + _offset_ms


def now_us() -> int:
    """Now on the service's clock, in Unix microseconds."""
    return time.time_ns() // 1000 + _offset_ms * 1000


def clock_offset_ms() -> int:
    """What this process adds to its host's clock (0 when within the dead band)."""
    return _offset_ms


def set_clock_offset_ms(measured_ms: int) -> int:
    """Take a measured offset (Redis's clock minus the host's), unless it is within :data:`OFFSET_DEADBAND_MS` of the
    one in use: returns the offset in use after it."""
    global _offset_ms
    if abs(measured_ms - _offset_ms) >= OFFSET_DEADBAND_MS:
        _offset_ms = 0 if abs(measured_ms) < OFFSET_DEADBAND_MS else measured_ms
    return _offset_ms
