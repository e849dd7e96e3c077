"""The outbox: outbound calls (webhooks, agent runs) committed with the event, delivered by a relay.

A handler never calls another system itself. ``ctx.outbox(kind, payload, key=…)`` stages an
:class:`OutboxRecord` as two writes in the handler's effect buffer: ``HSETNX outbox:{scope} <id> <json>``
and ``ZADD NX outbox-due <now> "<scope>\\x1f<id>"``. They land with the action's idempotency mark (APPLY) or
with the event's ``done`` commit (COMMIT), fenced like every staged write, so a paused or partitioned lease
holder whose commit is refused leaves no record, and one idempotency key makes one record.

The :class:`OutboxRelay` (a thread in every worker's main process) claims due records with one script
(OUTBOX_CLAIM moves their due time one lease ahead, so two relays do not take the same record at once),
hands each to the deliverer its plugin registered for the record's ``kind``, and settles it: ``delivered``;
or retried with full-jitter backoff (``worker/retry.py``); or ``dead`` after ``outbox_max_attempts``.
Delivery is at least once, so every record carries its idempotency ``key`` (the deliverer passes it on as
``Idempotency-Key`` / ``webhook-id``) and a receiver that dedupes sees each effect once.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from worker.keys import Keys
from worker.retry import backoff_ms
from worker.store import EventStore, now_ms

__all__ = ["Deliverer", "OutboxRecord", "OutboxRelay", "outbox_commands", "records_of_event"]

log = logging.getLogger(__name__)

SEPARATOR = "\x1f"
OutboxState = Literal["pending", "delivered", "dead"]


@dataclass(slots=True)
class OutboxRecord:
    """One outbound call: ``kind`` names the deliverer, ``key`` is the idempotency key it passes on."""

    id: str
    kind: str
    key: str
    payload: dict[str, Any]
    scope_key: str
    event_id: str
    created_at: int
    state: OutboxState = "pending"
    attempts: int = 0
    last_error: str = ""
    delivered_at: int = 0

    def to_json(self) -> str:
        data = {
            "id": self.id,
            "kind": self.kind,
            "key": self.key,
            "payload": self.payload,
            "scopeKey": self.scope_key,
            "eventId": self.event_id,
            "createdAt": self.created_at,
            "state": self.state,
            "attempts": self.attempts,
            "lastError": self.last_error,
            "deliveredAt": self.delivered_at,
        }
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))

    def to_public(self) -> dict[str, Any]:
        """The record as the run detail shows it (without the payload)."""
        data = json.loads(self.to_json())
        data.pop("payload")
        return {k: v for k, v in data.items() if v not in ("", 0) or k == "attempts"}

    @classmethod
    def from_json(cls, raw: str | bytes) -> OutboxRecord:
        d = json.loads(raw)
        return cls(
            id=d["id"],
            kind=d["kind"],
            key=d["key"],
            payload=dict(d.get("payload") or {}),
            scope_key=d["scopeKey"],
            event_id=d.get("eventId", ""),
            created_at=int(d.get("createdAt", 0)),
            state=d.get("state", "pending"),
            attempts=int(d.get("attempts", 0)),
            last_error=d.get("lastError", ""),
            delivered_at=int(d.get("deliveredAt", 0)),
        )


Deliverer = Callable[[OutboxRecord], None]
"""Performs one delivery; raises to have it retried. Passes ``record.key`` on as the idempotency key."""


def outbox_commands(keys: Keys, record: OutboxRecord, retention_s: int) -> list[list[str | int]]:
    """The staged writes that put ``record`` in the outbox once (a second staging changes nothing)."""
    return [
        ["HSETNX", keys.outbox(record.scope_key), record.id, record.to_json()],
        ["EXPIRE", keys.outbox(record.scope_key), retention_s],
        ["ZADD", keys.outbox_due, "NX", record.created_at, f"{record.scope_key}{SEPARATOR}{record.id}"],
    ]


def records_of_event(store: EventStore, scope_key: str, event_id: str) -> list[dict[str, Any]]:
    """The outbox records an event staged, for its run detail (oldest first)."""
    raw = store.client.hvals(store.keys.outbox(scope_key))
    records = [OutboxRecord.from_json(r) for r in raw]
    return [r.to_public() for r in sorted(records, key=lambda r: r.created_at) if r.event_id == event_id]


@dataclass
class OutboxRelay:
    """Claims due records and delivers them (see the module docstring)."""

    store: EventStore
    deliverers: Mapping[str, Deliverer]
    max_attempts: int = 10
    lease_ms: int = 60_000
    base_ms: int = 500
    cap_ms: int = 60_000
    batch: int = 50
    delivered: int = field(default=0, init=False)

    def run_once(self) -> int:
        """Deliver every record due now; returns how many were delivered."""
        members = self.store.scripts.outbox_claim(
            keys=[self.store.keys.outbox_due], args=[now_ms(), self.lease_ms, self.batch]
        )
        done = 0
        for member in members:
            scope_key, _, record_id = str(member).partition(SEPARATOR)
            done += self._deliver(scope_key, record_id, str(member))
        return done

    def run_forever(self, stop: threading.Event, interval_s: float) -> None:
        while not stop.wait(interval_s):
            try:
                while self.run_once() and not stop.is_set():
                    pass
            except Exception:
                log.exception("outbox relay pass failed")

    def _deliver(self, scope_key: str, record_id: str, member: str) -> int:
        client, keys = self.store.client, self.store.keys
        raw = client.hget(keys.outbox(scope_key), record_id)
        if raw is None or OutboxRecord.from_json(raw).state != "pending":
            client.zrem(keys.outbox_due, member)  # expired or already settled
            return 0
        record = OutboxRecord.from_json(raw)
        deliver = self.deliverers.get(record.kind)
        record.attempts += 1
        try:
            if deliver is None:
                raise LookupError(f"no deliverer for outbox kind {record.kind!r} (is its plugin loaded?)")
            deliver(record)
        except Exception as exc:
            record.last_error = f"{type(exc).__name__}: {exc}"[:500]
            self._retry_or_dead(record, member)
            return 0
        record.state, record.delivered_at, record.last_error = "delivered", now_ms(), ""
        self._settle(record, member, None)
        self.delivered += 1
        return 1

    def _retry_or_dead(self, record: OutboxRecord, member: str) -> None:
        if record.attempts >= self.max_attempts:
            record.state = "dead"
            log.error("outbox record %s is dead after %d attempts: %s", record.id, record.attempts, record.last_error)
            self._settle(record, member, None)
            return
        delay = backoff_ms(record.attempts, base_ms=self.base_ms, cap_ms=self.cap_ms)
        log.warning("outbox record %s failed (attempt %d): %s", record.id, record.attempts, record.last_error)
        self._settle(record, member, now_ms() + delay)

    def _settle(self, record: OutboxRecord, member: str, retry_at_ms: int | None) -> None:
        pipe = self.store.client.pipeline(transaction=True)
        pipe.hset(self.store.keys.outbox(record.scope_key), record.id, record.to_json())
        if retry_at_ms is None:
            pipe.zrem(self.store.keys.outbox_due, member)
        else:
            pipe.zadd(self.store.keys.outbox_due, {member: retry_at_ms}, xx=True)
        pipe.execute()


def wait_delivered(relay: OutboxRelay, predicate: Callable[[], bool], timeout_s: float) -> bool:
    """Run the relay in this thread until ``predicate`` holds (tests and tools)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        relay.run_once()
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()
