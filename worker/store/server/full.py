"""A full store pauses work; it never kills a worker process and never costs an event its life.

A ``noeviction`` Redis at its ``maxmemory`` refuses every write that may add memory (``OOM command not allowed
when used memory > 'maxmemory'``, redis-py's :class:`~redis.exceptions.OutOfMemoryError`), and inside MULTI
every queued command. A script is refused at its first such write only when nothing before it wrote (the state
is taken when the script starts; once it wrote, Redis lets it finish), so every script of ours either changes
nothing or runs whole. One thing turned that into a lost event: ``apply_staged`` runs handlers' staged writes
under ``pcall`` and reported the OOM as a refused write, which made the event dead; it now lets the OOM error
end the script (worker/store/lua/lib/staged.lua).

So a worker that meets a full store waits and does the same thing again: :class:`FullStoreWait` (tenacity)
backs off (:data:`BACKOFF_INITIAL_S` doubling up to :data:`BACKOFF_CAP_S`) while the error says the store is
full, for at most its budget (a quarter of the task's soft time limit) and only while the scope lease
is ours; each pause is counted (``agent_signal_store_full_backoffs_total{where}``) and the first of a run logged.
What waits this way: the drain's lease grant and its fair-share pop, an event's chain (run again from the start:
applied actions are found in their lanes, so nothing is applied twice), its commit and a batch commit (the same
fenced script again), and plugin tasks (run again: they are at-least-once anyway). None of them counts an
attempt, since the event's delivery is the same one. Past the budget the old path applies: the event stays at
its inbox head, uncommitted, and the next drain takes it (counting an attempt).

The broker side: Celery's consumer treats a broker ``ResponseError`` (an OOM refusing the ack of a message
when the broker is the same Redis) as unrecoverable and the worker exits; ``broker_channel_error_retry``
(worker/runtime/app.py) makes it reconnect instead.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from redis.exceptions import OutOfMemoryError, ResponseError
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_before_delay, wait_exponential
from tenacity.stop import stop_base

from worker.telemetry.process_metrics import process_metrics

__all__ = ["BACKOFF_CAP_S", "BACKOFF_INITIAL_S", "FullStoreWait", "StoreFullAgain", "is_store_full"]

log = logging.getLogger(__name__)
T = TypeVar("T")

BACKOFF_INITIAL_S = 0.05
BACKOFF_CAP_S = 2.0
OOM_TEXT = "command not allowed when used memory"


class StoreFullAgain(Exception):
    """Raised into a :class:`FullStoreWait` by work that met a full store and kept its own state (a chain):
    ``value`` is that state, for the caller when the wait gives up."""

    def __init__(self, value: object) -> None:
        super().__init__("the store was full")
        self.value = value


def is_store_full(exc: BaseException) -> bool:
    """True for Redis refusing a write because it is at its ``maxmemory`` (nothing of that write happened)."""
    if isinstance(exc, OutOfMemoryError | StoreFullAgain):
        return True
    return isinstance(exc, ResponseError) and (str(exc).startswith("OOM") or OOM_TEXT in str(exc))


class _LeaseLost(stop_base):
    def __init__(self, lost: threading.Event | None) -> None:
        self.lost = lost

    def __call__(self, retry_state: RetryCallState) -> bool:
        return self.lost is not None and self.lost.is_set()


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


class FullStoreWait:
    """Back off while the store is full (tenacity: exponential waits, ``budget_s`` at most, not past a lost
    lease): :meth:`call` runs an operation again after each pause; its error is raised when the wait ends."""

    def __init__(self, where: str, *, budget_s: float, lost: threading.Event | None = None) -> None:
        self.where = where
        self._budget_s = budget_s
        self._lost = lost

    def _retrying(self, budget_s: float) -> Retrying:
        return Retrying(
            retry=retry_if_exception(is_store_full),
            stop=stop_before_delay(budget_s) | _LeaseLost(self._lost),
            wait=wait_exponential(multiplier=BACKOFF_INITIAL_S, max=BACKOFF_CAP_S),
            before_sleep=self._count,
            sleep=_sleep,
            reraise=True,
        )

    def _count(self, retry_state: RetryCallState) -> None:
        if retry_state.attempt_number == 1:
            failed = retry_state.outcome.exception() if retry_state.outcome is not None else None
            log.warning(
                "store full (%s): %s backs off until there is room", type(failed).__name__, self.where
            )
        process_metrics().add("agent_signal_store_full_backoffs_total", {"where": self.where})

    def call(self, operation: Callable[[], T]) -> T:
        """``operation()``, again after a pause each time it finds the store full; its error past the budget.

        The first try runs bare: a drain calls this twice per event, and building tenacity's retry state for
        each call cost ~15% of a drained event's instructions when the store is almost never full. Its first
        store-full error is handed to tenacity as the first attempt's, so the waits, the warning and the count
        are what they were."""
        first: Exception | None = None
        started_s = time.monotonic()  # the budget counts the first try too, as when tenacity ran it
        try:
            return operation()
        except Exception as exc:
            if not is_store_full(exc):
                raise
            first = exc
        remaining_s = self._budget_s - (time.monotonic() - started_s)
        if (
            remaining_s <= 0
        ):  # the first try used the budget: no pause, its error (tenacity stopped there too)
            raise first

        def again() -> T:
            nonlocal first
            if first is not None:
                failed, first = first, None
                raise failed
            return operation()

        return self._retrying(remaining_s)(again)
