"""A full store pauses work; it never kills a worker process and never costs an event its life.

A ``noeviction`` Redis at its ``maxmemory`` refuses every write that may add memory (``OOM command not allowed
when used memory > 'maxmemory'``, redis-py's :class:`~redis.exceptions.OutOfMemoryError`), and inside MULTI
every queued command. A script is refused at its first such write only when nothing before it wrote (the state
is taken when the script starts; once it wrote, Redis lets it finish), so every script of ours either changes
nothing or runs whole. One thing turned that into a lost event: ``apply_staged`` runs handlers' staged writes
under ``pcall`` and reported the OOM as a refused write, which made the event dead; it now lets the OOM error
end the script (worker/scripts_lifecycle.py).

So a worker that meets a full store waits and does the same thing again: :class:`FullStoreWait` backs off
(capped exponential, :data:`BACKOFF_INITIAL_S` doubling up to :data:`BACKOFF_CAP_S`) while the error says the
store is full, for at most its budget (a quarter of the task's soft time limit) and only while the scope lease
is ours; each pause is counted (``agent_signal_store_full_backoffs_total{where}``) and the first of a run logged.
What waits this way: the drain's lease grant and its fair-share pop, an event's chain (run again from the start:
applied actions are found in their lanes, so nothing is applied twice), its commit and a batch commit (the same
fenced script again), and plugin tasks (run again: they are at-least-once anyway). None of them counts an
attempt, since the event's delivery is the same one. Past the budget the old path applies: the event stays at
its inbox head, uncommitted, and the next drain takes it (counting an attempt).

The broker side: Celery's consumer treats a broker ``ResponseError`` (an OOM refusing the ack of a message
when the broker is the same Redis) as unrecoverable and the worker exits; ``broker_channel_error_retry``
(worker/app.py) makes it reconnect instead.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from redis.exceptions import OutOfMemoryError, RedisError, ResponseError

from worker.process_metrics import process_metrics

__all__ = ["BACKOFF_CAP_S", "BACKOFF_INITIAL_S", "FullStoreWait", "is_store_full"]

log = logging.getLogger(__name__)
T = TypeVar("T")

BACKOFF_INITIAL_S = 0.05
BACKOFF_CAP_S = 2.0
OOM_TEXT = "command not allowed when used memory"


def is_store_full(exc: BaseException) -> bool:
    """True for Redis refusing a write because it is at its ``maxmemory`` (nothing of that write happened)."""
    if isinstance(exc, OutOfMemoryError):
        return True
    return isinstance(exc, ResponseError) and (str(exc).startswith("OOM") or OOM_TEXT in str(exc))


class FullStoreWait:
    """Back off while the store is full: :meth:`call` runs an operation again after each pause, :meth:`pause`
    is one pause. ``budget_s`` bounds the waiting; ``lost`` (the lease's flag) ends it early."""

    def __init__(self, where: str, *, budget_s: float, lost: threading.Event | None = None) -> None:
        self.where = where
        self.deadline = time.monotonic() + budget_s
        self.lost = lost
        self.delay_s = BACKOFF_INITIAL_S
        self.pauses = 0

    def pause(self, exc: BaseException | None = None) -> bool:
        """Wait once (counted); False, without waiting, when the budget is spent or the lease was lost."""
        if time.monotonic() + self.delay_s > self.deadline or (self.lost is not None and self.lost.is_set()):
            return False
        if self.pauses == 0:
            log.warning(
                "store full (%s): %s backs off until there is room",
                type(exc).__name__ if exc else "OOM",
                self.where,
            )
        self.pauses += 1
        process_metrics().add("agent_signal_store_full_backoffs_total", {"where": self.where})
        time.sleep(self.delay_s)
        self.delay_s = min(self.delay_s * 2, BACKOFF_CAP_S)
        return True

    def call(self, operation: Callable[[], T]) -> T:
        """``operation()``, again after a pause each time it finds the store full; its error past the budget."""
        while True:
            try:
                return operation()
            except RedisError as exc:
                if not is_store_full(exc) or not self.pause(exc):
                    raise
