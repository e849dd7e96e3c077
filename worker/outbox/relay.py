"""The outbox: outbound calls (webhooks, agent runs) committed with the event, delivered by a relay.

A handler never calls another system itself. ``ctx.outbox(kind, payload, key=…)`` stages an
:class:`OutboxRecord` as writes in the handler's effect buffer, after all of the handler's own writes:
``SET NX outbox:{scope}:<id> <json> EX <retention>``, its id in the event's index ``outbox-of:{scope}:<event>``,
and ``ZADD NX outbox-due <now> "<tenant>/<scope>\\x1f<id>"`` (one registry for every tenant). They land with the action's idempotency mark (APPLY) or
with the event's ``done`` commit (COMMIT), fenced like every staged write, so a paused or partitioned lease
holder whose commit is refused leaves no record, and one idempotency key makes one record.

The :class:`OutboxRelay` (a thread in every worker's main process) claims one due record at a time with
OUTBOX_CLAIM (its due time moves one lease ahead, on Redis's clock: that deadline is the claim), counts the
attempt, hands the record to the deliverer its plugin registered for its ``kind``, and settles it with
OUTBOX_SETTLE only while its claim still holds: ``delivered``; or retried with full-jitter backoff
(``worker/core/retry.py``); or ``dead`` after ``outbox_max_attempts``. A delivery slower than the lease can be
repeated by another relay, which the idempotency key covers; it can no longer overwrite the other's result.
Delivery is at least once, so every record carries its idempotency ``key`` (the deliverer passes it on as
``Idempotency-Key`` / ``webhook-id``) and a receiver that dedupes sees each effect once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from worker.chain.outbox_records import SEPARATOR, Deliverer, OutboxRecord, outbox_commands
from worker.core.clock import now_ms
from worker.core.retry import backoff_ms
from worker.keys.layout import Keys, split_scope_ref
from worker.outbox.journal_pump import pump_journal
from worker.store.calls import OutboxClaim, OutboxSettle
from worker.store.events import EventStore
from worker.telemetry.log_privacy import describe_error

__all__ = ["Deliverer", "OutboxRecord", "OutboxRelay", "outbox_commands", "records_of_event"]

log = logging.getLogger(__name__)


def records_of_event(store: EventStore, scope_key: str, event_id: str) -> list[dict[str, Any]]:
    """The outbox records an event staged, for its run detail (oldest first)."""
    keys = store.keys
    ids = sorted(str(i) for i in store.client.smembers(keys.outbox_of_event(scope_key, event_id)))
    if not ids:
        return []
    raw = store.client.mget([keys.outbox_record(scope_key, i) for i in ids])
    records = [OutboxRecord.from_json(r) for r in raw if r is not None]
    return [r.to_public() for r in sorted(records, key=lambda r: r.created_at)]


@dataclass
class OutboxRelay:
    """Claims due records one at a time and delivers them (see the module docstring)."""

    store: EventStore
    deliverers: Mapping[str, Deliverer]
    max_attempts: int = 10
    lease_ms: int = 60_000
    base_ms: int = 500
    cap_ms: int = 60_000
    batch: int = 50
    delivered: int = field(default=0, init=False)

    def run_once(self) -> int:
        """Deliver up to ``batch`` records due now, each under its own claim, and (with scope buckets) up to
        ``batch`` journal records in order; returns how many were delivered."""
        done, budget = 0, self.batch
        every = [k for t in self.store.known_tenants() or [self.store.tenant] for k in self._buckets(t)]
        for keys in every:
            due = keys.outbox_due  # each tenant's own, each bucket's own (its slot on a cluster)
            while budget > 0:
                claimed = self.store.scripts.run(OutboxClaim(due, self.lease_ms))
                if not claimed:
                    break
                budget -= 1
                member, deadline = str(claimed[0]), int(claimed[1])
                try:
                    done += self._deliver(due, member, deadline)
                except Exception:  # one bad record must not hold up the others: due again after its lease
                    log.exception("outbox record could not be handled", extra={"outboxRecord": member})
        if self.store.keys.buckets > 1:
            journaled = self._pump_journals(every, self.batch)
            self.delivered += journaled
            done += journaled
        return done

    def _pump_journals(self, every: list[Keys], budget: int) -> int:
        """Scope buckets: each bucket's journal in commit order (worker/outbox/journal_pump.py), the non-empty ones."""
        pipe = self.store.client.pipeline(transaction=False)
        for keys in every:
            pipe.zcard(keys.journal_due)
        waiting = [keys for keys, n in zip(every, pipe.execute(), strict=True) if int(n)]
        done = 0
        for keys in waiting:
            if done >= budget:
                break
            done += pump_journal(
                self.store,
                keys,
                self.deliverers,
                budget=budget - done,
                lease_ms=self.lease_ms,
                max_attempts=self.max_attempts,
                base_ms=self.base_ms,
                cap_ms=self.cap_ms,
            )
        return done

    def _buckets(self, tenant: str) -> list[Keys]:
        return self.store.keys.for_tenant(tenant).every_bucket()

    def run_forever(self, stop: threading.Event, interval_s: float) -> None:
        """Poll every ``interval_s``; while the store fails, back off up to 5 s (one log line per failure)."""
        wait_s = interval_s
        while not stop.wait(wait_s):
            try:
                while self.run_once() and not stop.is_set():
                    pass
                wait_s = interval_s
            except Exception as exc:
                log.warning("outbox relay pass failed: %s", describe_error(exc))
                wait_s = min(max(wait_s * 2, interval_s), 5.0)

    def _deliver(self, due: str, member: str, deadline: int) -> int:
        ref, _, record_id = member.partition(SEPARATOR)
        tenant, scope_key = split_scope_ref(ref)
        key = self.store.keys.for_tenant(tenant).outbox_record(scope_key, record_id)
        raw = self.store.client.get(key)
        if raw is None:
            log.error("outbox record expired before it was delivered", extra={"outboxRecord": record_id})
            self.store.client.zrem(due, member)
            return 0
        record = OutboxRecord.from_json(raw)
        if record.state != "pending":
            self.store.client.zrem(due, member)
            return 0
        deliver = self.deliverers.get(record.kind)
        if deliver is None:  # e.g. a rolling deploy: another worker may know the kind; not counted
            log.warning(
                "no deliverer for outbox kind %r here; leaving the record to another worker",
                record.kind,
                extra={"outboxRecord": record.id, "eventId": record.event_id or None},
            )
            return 0
        record.attempts += 1  # counted before the call: a relay that dies mid-delivery still used an attempt
        if not self._settle(due, key, member, deadline, record, keep_claim=True):
            return 0  # another relay took it over meanwhile
        try:
            deliver(record)
        except Exception as exc:
            record.last_error = f"{type(exc).__name__}: {exc}"[:500]  # in the record: erasure removes it
            self._retry_or_dead(due, key, member, deadline, record, describe_error(exc))
            return 0
        record.state, record.delivered_at, record.last_error = "delivered", now_ms(), ""
        if self._settle(due, key, member, deadline, record, retry_at_ms=None):
            self.delivered += 1
        return 1

    def _retry_or_dead(
        self, due: str, key: str, member: str, deadline: int, record: OutboxRecord, error: str
    ) -> None:
        where = {"outboxRecord": record.id, "eventId": record.event_id or None}
        if record.attempts >= self.max_attempts:
            record.state = "dead"
            log.error("outbox record is dead after %d attempts: %s", record.attempts, error, extra=where)
            self._settle(due, key, member, deadline, record, retry_at_ms=None)
            return
        delay = backoff_ms(record.attempts, base_ms=self.base_ms, cap_ms=self.cap_ms)
        log.warning("outbox record failed (attempt %d): %s", record.attempts, error, extra=where)
        self._settle(due, key, member, deadline, record, retry_at_ms=now_ms() + delay)

    def _settle(
        self,
        due: str,
        key: str,
        member: str,
        deadline: int,
        record: OutboxRecord,
        *,
        retry_at_ms: int | None = None,
        keep_claim: bool = False,
    ) -> bool:
        """Write the record and its next due time, only while our claim (its due time) still holds."""
        next_due = str(deadline) if keep_claim else ("" if retry_at_ms is None else str(retry_at_ms))
        reply = self.store.scripts.run(OutboxSettle(due, key, member, deadline, record.to_json(), next_due))
        if not int(reply):
            log.warning(
                "outbox record %s was claimed again by another relay; not settling it here", record.id
            )
        return bool(int(reply))


def wait_delivered(relay: OutboxRelay, predicate: Callable[[], bool], timeout_s: float) -> bool:
    """Run the relay in this thread until ``predicate`` holds (tests and tools)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        relay.run_once()
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()
