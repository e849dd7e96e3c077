"""The journal's two deliverers (the records are written by worker/store/journal.py): ``engine.apply`` runs
JOURNAL_APPLY in the records' slot, ``engine.enqueue`` admits a follow-up event in its own bucket."""

from __future__ import annotations

import json

from worker.chain.outbox_records import Deliverer, OutboxRecord, outbox_member
from worker.intake.emitter import Emitter
from worker.store.calls import JournalApply, Touched
from worker.store.events import EventStore
from worker.store.journal import JOURNAL_APPLY, JOURNAL_ENQUEUE, Command
from worker.store.records import PreparedEvent

__all__ = ["apply_deliverer", "enqueue_deliverer", "journal_deliverers"]


def apply_deliverer(store: EventStore, marker_ttl_s: int) -> Deliverer:
    """Delivers ``engine.apply`` records: JOURNAL_APPLY in the records' slot (raises to be retried)."""

    def deliver(record: OutboxRecord) -> None:
        commands: list[Command] = record.payload["commands"]
        keys = store.keys.for_tenant(record.tenant)
        # the scope too: two scopes' lanes may share an idempotency key (their records are each scope's own)
        marker = keys.applied_marker(commands[0][1], outbox_member(keys, record.scope_key, record.id))
        touched = list(dict.fromkeys(c[1] for c in commands if c[0].upper() not in ("PUBLISH", "THEN")))
        # durable: with AGENT_SIGNAL_WAIT_REPLICAS, delivered only once a replica has the writes
        call = JournalApply(marker, marker_ttl_s, json.dumps(commands), [Touched(key) for key in touched])
        store.durable(call)

    return deliver


def enqueue_deliverer(emitter: Emitter) -> Deliverer:
    """Delivers ``engine.enqueue`` records: the follow-up stored in its bucket and its drain sent
    (:meth:`~worker.intake.emitter.Emitter.admit`; a second delivery finds it stored: a duplicate)."""

    def deliver(record: OutboxRecord) -> None:
        p = record.payload
        event = PreparedEvent(
            event_id=str(p["eventId"]),
            scope_key=str(p["scopeKey"]),
            source_id=str(p["sourceId"]),
            body=str(p["body"]),
            source_type=str(p.get("sourceType") or ""),
            user_id=p.get("userId"),
            tenant=record.tenant,
        )
        emitter.admit([event])

    return deliver


def journal_deliverers(store: EventStore, emitter: Emitter, marker_ttl_s: int) -> dict[str, Deliverer]:
    """The relay's deliverers of the journal's two kinds."""
    return {JOURNAL_APPLY: apply_deliverer(store, marker_ttl_s), JOURNAL_ENQUEUE: enqueue_deliverer(emitter)}
