"""A plugin's deliverer, bounded: a call that does not return within ``timeout_s`` is a failed attempt.

A deliverer is asked to bound its whole call (docs/plugins.md), as the shipped agent-run webhook does, but one
that does not (an HTTP client with no timeout, a receiver that never answers) held its relay thread for good: in
the pool, its scope's lane and a slot of its tenant's half, with nothing listed anywhere; with
``AGENT_SIGNAL_OUTBOX_CONCURRENCY=1``, every tenant's calls on that worker. Bounded, the call runs on a thread of
its own and the relay waits for it at most ``AGENT_SIGNAL_OUTBOX_DELIVERY_TIMEOUT_S``: past that the attempt
raises :class:`DeliveryTimedOut` and is settled as any failure is (retried with backoff, ``dead`` after
``outbox_max_attempts``, listed by ``GET /v1/outbox/dead``), and the relay goes on. The late call is left to end
on its own (a Python thread cannot be stopped); whatever it answers then is dropped. It may still reach its
receiver, as a delivery slower than the claim always could: the retry carries the same ``record.key``, so a
receiver that dedupes sees the effect once. Each late call holds its thread and connection until it ends, so a
kind's deliverer has at most :data:`MAX_LATE_CALLS` of them: past that, an attempt fails at once without
starting another (a receiver that never answers cost a thread and a socket per attempt for good, a review).

Written by hand: ``concurrent.futures`` joins its threads at interpreter exit, so a worker asked to stop waited
on the very call this gives up on (as :mod:`worker.outbox.delivery_pool` notes); a daemon thread per call does
not, and costs about what the call's own connection does.
"""

from __future__ import annotations

import logging
import threading

from worker.chain.outbox_records import Deliverer, OutboxRecord

__all__ = ["MAX_LATE_CALLS", "DeliveryTimedOut", "bounded"]

log = logging.getLogger(__name__)

MAX_LATE_CALLS = 16  # a kind's calls still running past their timeout; more: an attempt fails without a call


class DeliveryTimedOut(Exception):
    """The deliverer did not return within the delivery timeout: a failed attempt, retried like any other."""


def bounded(deliverer: Deliverer, timeout_s: float) -> Deliverer:
    """``deliverer`` run on a daemon thread of its own and waited for at most ``timeout_s``."""
    late = [0]  # this kind's calls abandoned and still running (under ``counting``)
    counting = threading.Lock()

    def deliver(record: OutboxRecord) -> None:
        with counting:
            if late[0] >= MAX_LATE_CALLS:
                raise DeliveryTimedOut(
                    f"the {record.kind!r} deliverer has {late[0]} calls still running past their timeout "
                    f"({timeout_s:g} s, AGENT_SIGNAL_OUTBOX_DELIVERY_TIMEOUT_S): not called again until one ends"
                )
        outcome: list[BaseException | None] = []
        finished, abandoned, lock = threading.Event(), threading.Event(), threading.Lock()

        def call() -> None:
            try:
                deliverer(record)
            # a deliverer's SystemExit is its failure too (as the relay reads it)
            except BaseException as exc:
                outcome.append(exc)
            else:
                outcome.append(None)
            with lock:
                finished.set()
                was_abandoned = abandoned.is_set()
            if was_abandoned:
                with counting:
                    late[0] -= 1
                log.warning(
                    "an outbox delivery returned after its attempt had timed out; its answer is dropped",
                    extra={"outboxRecord": record.id, "outboxKind": record.kind},
                )

        threading.Thread(target=call, name=f"outbox-call-{record.kind}", daemon=True).start()
        if not finished.wait(timeout_s):
            with lock:
                if not finished.is_set():  # it may have ended between the wait and the lock
                    abandoned.set()
                    with counting:
                        late[0] += 1
                    raise DeliveryTimedOut(
                        f"the {record.kind!r} deliverer did not return within {timeout_s:g} s "
                        "(AGENT_SIGNAL_OUTBOX_DELIVERY_TIMEOUT_S)"
                    )
        error = outcome[0]
        if error is not None:
            raise error

    return deliver
