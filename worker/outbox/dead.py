"""Outbox records that failed every attempt: listed (``GET /v1/outbox/dead``) and sent again
(``POST /v1/outbox/redrive``), per tenant.

A record the relay settles ``dead`` (worker/outbox/relay.py) joins its bucket's dead index (``outbox-dead``, scored by
when it died) in the script that settles it; before, it only left the due set, and nothing but its event's run
detail said so (the event itself reads ``done``), until it expired. The record keeps its TTL (the outbox retention,
``AGENT_SIGNAL_OUTBOX_RETENTION_S``): it holds a user's payload, which erasure finds through its event, so it is
listed and redriven for that long; an index entry whose record expired is dropped as a page reads it.

A redrive makes the record ``pending`` again with its attempts at zero (its last error kept) and due now, in the due
set its kind is relayed from (a bucket's journal for both journal kinds, ``engine.apply`` and ``engine.enqueue``,
scored in µs as the journal is: they run after every record journaled before),
under WATCH of the record, so a record erased or redriven meanwhile is answered ``notDead`` and nothing is written.

A record can also die after its delivery: its deliverer handed the work on (a plugin task, the agent run), and that
work failed every attempt. :func:`fail_delivered` settles such a record ``dead`` with the work's error (``delivered``,
or still claimed by the relay that handed it on) and lists it, so the failure is listed, redriven and erased as a
failed delivery is.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import WatchError

from worker.chain.outbox_records import SEPARATOR, OutboxRecord, outbox_member
from worker.core.clock import now_ms
from worker.keys.layout import BucketKeys, Keys, split_scope_ref
from worker.store.calls import OutboxFail
from worker.store.events import EventStore
from worker.store.journal import JOURNAL_APPLY, JOURNAL_ENQUEUE, journal_score_us
from worker.store.records import to_str
from worker.store.scripts import Scripts

__all__ = ["BadOutboxCursor", "DeadPage", "dead_page", "fail_delivered", "redrive_dead"]

REDRIVE_TRIES = 20  # WATCH retries of one record's redrive before it is answered notDead
# relayed from a bucket's journal, in order (worker/store/journal.py)
JOURNAL_KINDS = (JOURNAL_APPLY, JOURNAL_ENQUEUE)


class BadOutboxCursor(ValueError):
    """A cursor that is not one a page of ``GET /v1/outbox/dead`` gave."""


@dataclass(frozen=True, slots=True)
class DeadPage:
    records: list[dict[str, Any]]
    total: int
    cursor: str | None

    def to_json_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"records": self.records, "total": self.total}
        if self.cursor is not None:
            out["cursor"] = self.cursor
        return out


def _cursor(score: float, member: str) -> str:
    return f"{score:.0f}:{base64.urlsafe_b64encode(member.encode()).decode().rstrip('=')}"


def _parse_cursor(cursor: str) -> tuple[float, str]:
    ms, _, tail = cursor.partition(":")
    try:
        if not ms.isdigit() or not tail:
            raise ValueError
        padded = tail + "=" * (-len(tail) % 4)
        # validate: urlsafe_b64decode skips what is not base64 (``%%%%``)
        return float(ms), base64.b64decode(padded, altchars=b"-_", validate=True).decode()
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise BadOutboxCursor("cursor must be a page's cursor") from None


def _record_key(tenant: Keys, member: str) -> tuple[str, str, str]:
    """(record key, scope key, record id) of a dead-index member ``<tenant>/<scopeKey>\\x1f<recordId>``."""
    ref, _, record_id = member.partition(SEPARATOR)
    scope_key = split_scope_ref(ref)[1]
    return tenant.outbox_record(scope_key, record_id), scope_key, record_id


def _dead_index(bucket: BucketKeys) -> str:
    return bucket.outbox_dead


def dead_page(store: EventStore, tenant: Keys, *, limit: int = 50, cursor: str | None = None) -> DeadPage:
    """The tenant's dead outbox records, latest death first, after ``cursor`` (a page's); each as the run detail
    shows it, with its ``scopeKey``, ``recordId`` and ``deadAt``. Entries whose record expired are dropped."""
    before = None if not cursor else _parse_cursor(cursor)  # empty: no cursor, as every list reads it
    entries = store.newest_of(tenant, _dead_index, 0, limit + 1, before=before)
    shown = entries[:limit]
    following = _cursor(shown[-1][1], shown[-1][0]) if len(entries) > limit else None
    located = [(_record_key(tenant, member), member, at, bucket) for member, at, bucket in shown]
    raw = store.client.mget([where[0] for where, *_ in located]) if located else []
    records, gone = [], []
    for (where, member, at, bucket), value in zip(located, raw, strict=True):
        if value is None:
            gone.append((bucket, member))
            continue
        public = OutboxRecord.from_json(value).to_public()
        records.append({**public, "scopeKey": where[1], "recordId": where[2], "deadAt": int(at)})
    if gone:  # expired with the outbox retention: the index forgets them as it meets them
        pipe = store.client.pipeline(transaction=False)
        for bucket, member in gone:
            pipe.zrem(bucket.outbox_dead, member)
        pipe.execute()
    return DeadPage(records, store.index_size(tenant, _dead_index), following)


def redrive_dead(
    store: EventStore, tenant: Keys, targets: Sequence[tuple[str, str]] | None
) -> dict[str, list[dict[str, str]]]:
    """Send the given dead records again (``(scopeKey, recordId)``; None: every dead record of the tenant):
    ``{"redriven": [...], "notDead": [...]}``, each item ``{"scopeKey", "recordId"}``."""
    if targets is None:
        targets = [_record_key(tenant, m)[1:] for b in tenant.every_bucket() for m in _members(store, b)]
    redriven: list[dict[str, str]] = []
    not_dead: list[dict[str, str]] = []
    for scope_key, record_id in dict.fromkeys(targets):
        named = {"scopeKey": scope_key, "recordId": record_id}
        (redriven if _redrive_one(store, tenant, scope_key, record_id) else not_dead).append(named)
    return {"redriven": redriven, "notDead": not_dead}


def _members(store: EventStore, bucket: BucketKeys) -> list[str]:
    return [to_str(m) for m in store.client.zrange(bucket.outbox_dead, 0, -1)]


def _located(tenant: Keys, scope_key: str, record_id: str) -> tuple[BucketKeys, str, str]:
    """(its bucket's keys, its key, its member of the bucket's sets) of the tenant's record ``record_id``."""
    return (
        tenant.for_scope(scope_key),
        tenant.outbox_record(scope_key, record_id),
        outbox_member(tenant, scope_key, record_id),
    )


def _redrive_one(store: EventStore, tenant: Keys, scope_key: str, record_id: str) -> bool:
    bucket, key, member = _located(tenant, scope_key, record_id)
    for _ in range(REDRIVE_TRIES):
        with store.client.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(key)  # type: ignore[no-untyped-call]
                raw = pipe.get(key)
                record = None if raw is None else OutboxRecord.from_json(raw)
                if record is None or record.state != "dead":
                    pipe.unwatch()
                    store.client.zrem(bucket.outbox_dead, member)  # gone, or not dead: not listed any more
                    return False
                record.state, record.attempts = "pending", 0
                journal = record.kind in JOURNAL_KINDS
                pipe.multi()
                pipe.set(key, record.to_json(), keepttl=True)
                pipe.zrem(bucket.outbox_dead, member)
                # a journal's scores are µs of the commit that staged it (worker/store/journal.py), the due set's ms
                due, score = (
                    (bucket.journal_due, journal_score_us()) if journal else (bucket.outbox_due, now_ms())
                )
                pipe.zadd(due, {member: score})
                pipe.execute()
                return True
            except WatchError:
                continue
    return False


def fail_delivered(scripts: Scripts, tenant: Keys, scope_key: str, record_id: str, error: str) -> bool:
    """Settle the tenant's record ``record_id`` (of ``scope_key``) ``dead`` with ``error`` as its last error after
    its delivery, and list it in its bucket's dead index (OUTBOX_FAIL, while the record is as read here): True when
    it is dead now. A ``delivered`` record, or a ``pending`` one a relay holds a claim on, by Redis's clock (the
    deliverer handed the work on, and the relay has not yet written ``delivered``; it leaves the due set, so that
    relay's settle writes nothing). False, writing nothing, when it is gone (expired, erased), dead already, or
    pending unclaimed (a retry or a redrive will deliver it again)."""
    bucket, key, member = _located(tenant, scope_key, record_id)
    for _ in range(REDRIVE_TRIES):
        raw = scripts.client.get(key)
        record = None if raw is None else OutboxRecord.from_json(raw)
        if record is None or record.state not in ("delivered", "pending"):
            return False
        claimed = int(record.state == "pending")
        record.state, record.last_error = "dead", error
        call = OutboxFail(
            bucket.outbox_due, key, bucket.outbox_dead, member, to_str(raw), record.to_json(), claimed
        )
        settled = int(scripts.run(call))
        if settled >= 0:
            return settled == 1
    return False
