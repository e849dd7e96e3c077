"""A costly read, reused for a while in proportion to its cost, one at a time per tenant, per web process.

``GET /v1/overview`` counts a tenant's runs by reading every run the indexes hold: about 60-100 ms per 10,000
runs, so at the retained-events quota (500,000) several seconds of Redis per call, which a read key at its rate
limit could ask for a hundred times a second and starve every other tenant. A :class:`ReadMemo` keeps each
tenant's last result for ``DUTY`` times as long as it took to read (``MAX_KEEP_S`` at most), and while one call
reads a tenant again, the others are answered its last result at once (only a tenant's first read makes callers
wait, for it; a read that failed is not repeated by them: they get its error until as long as it took times
``DUTY`` has passed). So one process spends at most about 1/(1 + ``DUTY``) of its time on one tenant's read
(reads up to ``MAX_KEEP_S / DUTY`` long), whatever the callers do; a small tenant's read (a few ms) is kept for a
fraction of a second and its counts stay current. A result is reused while fresh (``MAX_KEEP_S`` at most) and, to
the callers that come while it is read again, however old it is. Each web process keeps its own: Redis reads a
tenant's runs at most once per keep per replica.
Written by hand (no cache library keeps an entry in proportion to its cost: docs/decisions.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["DUTY", "MAX_KEEP_S", "ReadMemo"]

T = TypeVar("T")
DUTY = (
    20  # a result is kept 20x as long as its read took: at most ~5% of a process's time on one tenant's read
)
MAX_KEEP_S = 300.0  # fresh for at most this long (a read of 15 s or more)


@dataclass
class _Entry(Generic[T]):
    lock: threading.Lock = field(default_factory=threading.Lock)
    value: T | None = None
    error: Exception | None = None  # the last read's, while fresh: not read again by its waiters
    fresh_until_s: float = 0.0


class ReadMemo(Generic[T]):
    """``get(tenant, read)``: ``read()``'s result, or the tenant's last one while it is fresh or being read."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._entries: dict[str, _Entry[T]] = {}
        self._guard = threading.Lock()

    def get(self, tenant: str, read: Callable[[], T]) -> T:
        with self._guard:
            entry = self._entries.setdefault(tenant, _Entry())
        last = entry.value
        if last is not None and self._clock() < entry.fresh_until_s:
            return last
        # one read per tenant at a time: with a last result, the others take it rather than wait
        if last is None:
            entry.lock.acquire()
        elif not entry.lock.acquire(blocking=False):
            return last
        try:
            if self._clock() < entry.fresh_until_s:  # read by the caller this one waited for
                if entry.error is not None:
                    raise entry.error
                if entry.value is not None:
                    return entry.value
            started_s = self._clock()
            try:
                value = read()
            except Exception as exc:
                entry.error = exc
                entry.fresh_until_s = self._clock() + min((self._clock() - started_s) * DUTY, MAX_KEEP_S)
                raise
            took_s = self._clock() - started_s
            entry.value, entry.error = value, None
            entry.fresh_until_s = self._clock() + min(took_s * DUTY, MAX_KEEP_S)
            return value
        finally:
            entry.lock.release()
