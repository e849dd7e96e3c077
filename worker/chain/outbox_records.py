"""The outbox's records: one outbound call staged by a handler (or a journal entry, worker/store/journal.py), and
the staged writes that put it in the outbox. Plain records and key arithmetic, no I/O: the relay that
delivers them is :mod:`worker.outbox.relay`."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from worker.keys.layout import Keys

__all__ = [
    "SEPARATOR",
    "Deliverer",
    "OutboxRecord",
    "OutboxState",
    "outbox_commands",
    "outbox_member",
    "record_id",
]

SEPARATOR = "\x1f"
OutboxState = Literal["pending", "delivered", "dead"]


def outbox_member(keys: Keys, scope_key: str, record_id: str) -> str:
    """A record's member of its bucket's due, journal and dead sets: ``<tenant>/<scopeKey>\x1f<recordId>``."""
    return f"{keys.scope_ref(scope_key)}{SEPARATOR}{record_id}"


def record_id(kind: str, key: str) -> str:
    """The id of the record ``ctx.outbox(kind, …, key=key)`` stages: one per kind and idempotency key."""
    return f"{kind}:{key}"


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
    tenant: str = "default"

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
            "tenant": self.tenant,
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
            tenant=str(d.get("tenant", "default")),
        )


Deliverer = Callable[[OutboxRecord], None]
"""Performs one delivery; raises to have it retried. Passes ``record.key`` on as the idempotency key."""


def outbox_commands(
    keys: Keys, record: OutboxRecord, retention_s: int, *, journal_score_us: int | None = None
) -> list[list[str | int]]:
    """The staged writes that put ``record`` in the outbox once (a second staging changes nothing), in the
    slot of its scope's bucket; with ``journal_score_us``, on the bucket's journal (applied in that order)."""
    keys = keys.for_scope(record.scope_key)
    member = outbox_member(keys, record.scope_key, record.id)
    index = keys.outbox_of_event(record.scope_key, record.event_id or "-")
    return [
        ["SET", keys.outbox_record(record.scope_key, record.id), record.to_json(), "NX", "EX", retention_s],
        ["SADD", index, record.id],
        ["EXPIRE", index, retention_s],
        ["ZADD", keys.outbox_due, "NX", record.created_at, member]
        if journal_score_us is None
        else [
            "ZADD",
            keys.journal_due,
            "NX",
            journal_score_us,
            member,
        ],  # the relay's ordered mode (worker/outbox/relay.py)
    ]
