"""The journal's two deliverers (the records are written by worker/store/journal.py): ``engine.apply`` runs
JOURNAL_APPLY in the records' slot, ``engine.enqueue`` admits a follow-up event in its own bucket."""

from __future__ import annotations

import json
import re

from redis.exceptions import ResponseError

from worker.chain.outbox_records import Deliverer, OutboxRecord, outbox_member
from worker.core.errors import PermanentFailure
from worker.intake.emitter import Emitter
from worker.store.calls import JournalApply, Touched
from worker.store.events import EventStore
from worker.store.journal import JOURNAL_APPLY, JOURNAL_ENQUEUE, Command
from worker.store.records import PreparedEvent

__all__ = ["apply_deliverer", "enqueue_deliverer", "journal_deliverers"]


# JOURNAL_APPLY's answers that no retry changes: a command that failed midway (its marker keeps why, so every
# later delivery fails the same way) or commands refused before any was written (a disallowed command, a key of
# another type). Retried, such a head held up its bucket's whole journal through every backoff (an audit).
FINAL_ANSWERS = {"PARTIAL": "JOURNAL_PARTIAL", "REFUSED": "JOURNAL_REFUSED"}
# the answer's first word (EventStore.durable gives a script's refusal in its own words with
# AGENT_SIGNAL_WAIT_REPLICAS too, where redis-py words it for the pipeline that runs it with WAIT)
FINAL_ANSWER = re.compile(r"^(PARTIAL|REFUSED) ")


def apply_deliverer(store: EventStore, marker_ttl_s: int) -> Deliverer:
    """Delivers ``engine.apply`` records: JOURNAL_APPLY in the records' slot. A store error raises to be retried;
    an answer no retry changes (:data:`FINAL_ANSWERS`) raises :class:`PermanentFailure`: the record is dead at
    once and the journal goes on to the next one."""

    def deliver(record: OutboxRecord) -> None:
        commands: list[Command] = record.payload["commands"]
        keys = store.keys.for_tenant(record.tenant)
        # the scope too: two scopes' lanes may share an idempotency key (their records are each scope's own)
        marker = keys.applied_marker(commands[0][1], outbox_member(keys, record.scope_key, record.id))
        touched = list(dict.fromkeys(c[1] for c in commands if c[0].upper() not in ("PUBLISH", "THEN")))
        # durable: with AGENT_SIGNAL_WAIT_REPLICAS, delivered only once a replica has the writes
        call = JournalApply(marker, marker_ttl_s, json.dumps(commands), [Touched(key) for key in touched])
        try:
            store.durable(call)
        except ResponseError as exc:
            final = FINAL_ANSWER.search(str(exc))
            if final is None:
                raise
            raise PermanentFailure(str(exc), code=FINAL_ANSWERS[final.group(1)]) from exc

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
