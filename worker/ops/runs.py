"""The runs explorer: find events by status, source type, scope, user and enqueue time, newest first; find an
event by its source id; the dead letters operators discarded.

The indexes (``Keys.runs``, written by the state-changing scripts, see worker/store/lua/lib/index.lua)
are zsets of event ids scored by enqueue time, each bounded by ``AGENT_SIGNAL_RUN_INDEX_MAX`` and the dedupe
window: one per source type (every event is in exactly one), one per scope, one per user, and one per status an
event waits or ends in outside done (active, dead, cancelled, discarded). A done event is in no status index
(issue 29: that index repeated the type indexes for ~130 bytes per retained event); a bucket's registry of
source types (``runs:types``, each with its last admission) names the type indexes that hold events of the
window, and a type index keeps ``AGENT_SIGNAL_RUN_INDEX_MAX`` events besides the bucket's active ones (a
backlog of one type does not push its finished events out). A query walks ONE index, the most selective its filters
name (scope, then user, then source type, then a status other than done), newest first, one page per round trip
(RUNS_PAGE); a query for done events walks the type indexes together, and a query of no such filter walks them
with the status indexes (an active backlog outgrows a type index's bound: it is listed whole), merging their
pages as it merges the buckets' (an event found in two of them is listed once). It reads each page's records
(HMGET of :data:`~worker.documents.event_records.LIST_FIELDS`, one pipelined round trip) and keeps those that
match every other filter: the intersection is done here, over bounded pages. A query examines at most
:data:`MAX_EXAMINED` index entries; when it stops there (or at ``limit``), the cursor resumes after the last
entry examined, so a page may hold fewer than ``limit`` events and still have a cursor. Order is (enqueue
time, event id) descending, stable across pages while events arrive.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from worker.core.clock import now_ms
from worker.documents.event_body import body_of
from worker.documents.event_records import status_record
from worker.keys.layout import BucketKeys, Keys, glob_escaped
from worker.ops.audit import AUDIT_MAXLEN, CLI_ACTOR, log_audit
from worker.settings import Settings
from worker.store.calls import Discard, RunsPage
from worker.store.events import EventStore
from worker.store.reads import dlq_index, newest_first
from worker.store.records import to_str

__all__ = [
    "MAX_EXAMINED",
    "STATUSES",
    "STATUS_INDEXES",
    "BadCursor",
    "BadDlqCursor",
    "DlqPage",
    "RunPage",
    "RunQuery",
    "discard",
    "discarded_index",
    "discarded_records",
    "dlq_page",
    "event_detail",
    "every_index",
    "find_by_source",
    "list_runs",
    "parse_dlq_cursor",
    "register_indexed_types",
    "source_types",
    "status_indexes",
    "type_indexes",
    "window_start_ms",
]

STATUSES = ("queued", "processing", "done", "dead", "cancelled", "discarded", "erased")
_STATUS_INDEX = {"queued": "active", "processing": "active", "dead": "dead"}
_STATUS_INDEX |= {"cancelled": "cancelled", "discarded": "discarded"}
STATUS_INDEXES = (
    "active",
    "dead",
    "cancelled",
    "discarded",
)  # a done event is in none: its type index lists it
# Done events were indexed by status before issue 29; that index is read until it expires (one dedupe window
# after the upgrade), so a done event of a type not enqueued since is still listed.
_LEGACY_DONE = ("status", "done")


def status_indexes(keys: BucketKeys) -> list[str]:
    """A bucket's status indexes (an erased event stays in the index of the status it had)."""
    return [keys.runs("status", name) for name in STATUS_INDEXES]


def type_indexes(keys: BucketKeys, types: Sequence[str]) -> list[str]:
    """The bucket's type indexes (``types``: its registry, :func:`source_types`) and the done index written before
    issue 29: together, every event of the bucket (each is in its type's index)."""
    return [keys.runs("type", name) for name in types] + [keys.runs(*_LEGACY_DONE)]


def every_index(keys: BucketKeys, types: Sequence[str]) -> list[str]:
    """Every index an unfiltered walk reads: the type indexes and the status indexes (an event is in one type
    index and at most one status index; active is not trimmed by count, so a backlog is listed whole)."""
    return type_indexes(keys, types) + status_indexes(keys)


def source_types(client: Any, buckets: Sequence[BucketKeys], since_ms: int) -> dict[str, list[str]]:
    """Each bucket's source types admitted since ``since_ms`` (its registry, ``runs:types``: the types whose
    indexes hold events of the window), as bucket prefix -> sorted names: one pipelined round trip."""
    pipe = client.pipeline(transaction=False)
    for k in buckets:
        pipe.zrangebyscore(k.runs("types"), since_ms, "+inf")
    return {
        k.bucket_prefix: sorted(to_str(name) for name in names)
        for k, names in zip(buckets, pipe.execute(), strict=True)
    }


def register_indexed_types(client: Any, keys: Keys, *, ttl_s: int, dry_run: bool = False) -> int:
    """Name in each bucket's registry the source types whose index holds events but that the registry lacks
    (events admitted before the registry: an upgrade's, docs/operations.md), each with its index's newest
    enqueue time (a registry it makes expires in ``ttl_s``, the dedupe window, as the admissions' do); returns
    how many were (or, with ``dry_run``, would be) registered. Idempotent."""
    registered = 0
    for bucket in keys.every_bucket():
        prefix = bucket.runs("type", "")
        pattern = glob_escaped(prefix) + "*"
        registry = bucket.runs("types")
        named = {to_str(name) for name in client.zrange(registry, 0, -1)}
        for raw in client.scan_iter(match=pattern, count=1000):
            name = to_str(raw)[len(prefix) :]
            newest = client.zrevrange(prefix + name, 0, 0, withscores=True)
            if not newest or name in named:
                continue
            registered += 1
            if not dry_run:
                client.zadd(registry, {name: newest[0][1]}, gt=True)
                if int(client.ttl(registry)) < 0:
                    client.expire(registry, ttl_s)
    return registered


def window_start_ms(settings: Settings) -> int:
    """The oldest enqueue time an index can still hold (the dedupe window before now)."""
    return now_ms() - settings.dedupe_window_s * 1000


MAX_EXAMINED = 2000


class BadCursor(ValueError):
    """The cursor is not one this API handed out."""


@dataclass(frozen=True, slots=True)
class RunQuery:
    status: str | None = None
    source_type: str | None = None
    scope_key: str | None = None
    user_id: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    limit: int = 50
    cursor: str | None = None

    @property
    def walks_types(self) -> bool:
        """Whether :meth:`indexes` needs the bucket's registry of source types (no narrower index applies)."""
        narrower = (self.scope_key, self.user_id, self.source_type)
        return all(f is None for f in narrower) and self.status not in _STATUS_INDEX

    def indexes(self, keys: BucketKeys, types: Sequence[str] = ()) -> list[str]:
        """The indexes this query walks: the most selective one its filters name; for done events, the type
        indexes (``types``: the bucket's registry, needed when :attr:`walks_types`); without a filter, those
        and the status indexes."""
        if self.scope_key is not None:
            return [keys.runs_of_scope(self.scope_key)]
        if self.user_id is not None:
            return [keys.user_events(self.user_id)]
        if self.source_type is not None:
            return [keys.runs("type", self.source_type)]
        if self.status in _STATUS_INDEX:
            return [keys.runs("status", _STATUS_INDEX[self.status])]
        if self.status == "done":
            return type_indexes(keys, types)
        return every_index(keys, types)

    def matches(self, record: dict[str, Any]) -> bool:
        checks = (
            (self.status, record.get("status")),
            (self.source_type, record.get("sourceType")),
            (self.scope_key, record.get("scopeKey")),
            (self.user_id, record.get("userId")),
        )
        if any(wanted is not None and wanted != found for wanted, found in checks):
            return False
        at = int(record.get("enqueuedAt", 0))
        return (self.since_ms is None or at >= self.since_ms) and (
            self.until_ms is None or at <= self.until_ms
        )


@dataclass(frozen=True, slots=True)
class RunPage:
    events: list[dict[str, Any]]
    cursor: str | None


def encode_cursor(score: int, member: str) -> str:
    raw = json.dumps([score, member], separators=(",", ":")).encode("utf-8")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_cursor(cursor: str) -> tuple[int, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        score, member = json.loads(raw)
    except (ValueError, TypeError, binascii.Error):
        raise BadCursor(f"cursor {cursor[:40]!r} is not one this API handed out") from None
    if not isinstance(score, int) or not isinstance(member, str) or not member:
        raise BadCursor(f"cursor {cursor[:40]!r} is not one this API handed out")
    return score, member


def list_runs(store: EventStore, tenant: Keys, query: RunQuery) -> RunPage:
    """One page of the tenant's events matching ``query``, newest first (see the module docstring). With scope
    buckets the index is walked in every bucket at once and the pages merged in order (a scope's index only in
    the scope's bucket)."""
    buckets = tenant.every_bucket() if query.scope_key is None else [tenant.for_scope(query.scope_key)]
    types = source_types(store.client, buckets, window_start_ms(store.settings)) if query.walks_types else {}
    indexes = [(k, index) for k in buckets for index in query.indexes(k, types.get(k.bucket_prefix, ()))]
    if query.cursor:
        top, after = decode_cursor(query.cursor)
        max_score = str(top)
    else:
        max_score, after = ("+inf" if query.until_ms is None else str(query.until_ms)), ""
    min_score = "-inf" if query.since_ms is None else str(query.since_ms)
    page_size = max(query.limit, 50)
    found: list[dict[str, Any]] = []
    examined = 0
    while examined < MAX_EXAMINED:
        pages = [RunsPage(index, max_score, after, min_score, page_size) for _, index in indexes]
        entries, full = _merged(indexes, store.scripts.run_batch(pages), page_size)
        for position, (record, (member, score, _)) in enumerate(
            zip(_records(store, entries), entries, strict=True)
        ):
            examined += 1
            if record is not None and query.matches(record):
                found.append(record)
            if len(found) == query.limit:
                more = position + 1 < len(entries) or full
                return RunPage(found, encode_cursor(score, member) if more else None)
        if not full or not entries:
            return RunPage(found, None)
        max_score, after = str(entries[-1][1]), entries[-1][0]
    return RunPage(found, encode_cursor(int(max_score), after))


Entry = tuple[str, int, BucketKeys]  # (event id, enqueue time, the key builder of its bucket)


def _merged(
    indexes: Sequence[tuple[BucketKeys, str]], pages: Sequence[Any], page_size: int
) -> tuple[list[Entry], bool]:
    """The buckets' (and status indexes') pages merged in order, cut where a full page ends (entries past that
    point may still be missing from it), and whether any page was full (there is more to walk). An event that
    changed status between two of the pages' reads is listed once."""
    merged: list[Entry] = []
    seen: set[tuple[str, str]] = set()  # (bucket, event id)
    cut: tuple[float, tuple[int, ...]] | None = None
    for (k, _), flat in zip(indexes, pages, strict=True):
        entries = [(str(flat[i]), int(float(flat[i + 1])), k) for i in range(0, len(flat), 2)]
        merged += [e for e in entries if (k.bucket_prefix, e[0]) not in seen]
        seen.update((k.bucket_prefix, e[0]) for e in entries)
        if len(entries) == page_size:
            last = newest_first(entries[-1][0], entries[-1][1])
            cut = last if cut is None or last < cut else cut
    merged.sort(key=lambda e: newest_first(e[0], e[1]))
    if cut is not None:
        merged = [e for e in merged if newest_first(e[0], e[1]) <= cut]
    return merged, cut is not None


def _records(store: EventStore, entries: Sequence[Entry]) -> list[dict[str, Any] | None]:
    return store.records([(member, k) for member, _, k in entries])


def event_detail(store: EventStore, tenant: Keys, event_id: str) -> dict[str, Any] | None:
    """The status record with the attempts history and the stored event (``event``: type, ids, payload), or
    None when unknown; an erased event's tombstone has no ``event``."""
    bucket = store.locate(tenant, event_id)
    raw = {str(k): str(v) for k, v in store.client.hgetall(bucket.event(event_id)).items()}
    if not raw:
        return None
    record = status_record(raw, event_id)
    record.setdefault("attemptsHistory", [])
    body = body_of(raw, event_id)
    if body is None and raw.get("state") == "done" and raw.get("sourceId"):  # not an erased one's tombstone
        moved = store.body_in_chain(bucket, event_id)  # a done event's body is kept in its chain (issue 29)
        body = None if moved is None else body_of({**raw, "event": moved}, event_id)
    if body is not None:
        record["event"] = body
    return record


def find_by_source(store: EventStore, tenant: Keys, source_id: str) -> list[dict[str, Any]]:
    """The tenant's stored events with this source id (any scope, any source type), newest first."""
    return store.find_by_source(tenant, source_id)


def discard(
    store: EventStore, tenant: Keys, event_ids: Sequence[str], reason: str, *, actor: str = CLI_ACTOR
) -> tuple[list[str], list[str]]:
    """Discard the tenant's dead events (DISCARD: worker/store/lua/discard.lua), each audited with ``actor``
    (worker/ops/audit.py); returns (discarded, not dead)."""
    settings = store.settings
    located = [store.locate(tenant, event_id, in_dlq=True) for event_id in event_ids]
    calls = [
        Discard(
            ev=k.event(event_id),
            dlq=k.dlq,
            stats=k.stats,
            runs_dead=k.runs("status", "dead"),
            runs_discarded=k.runs("status", "discarded"),
            runs_discarded_at=k.runs("discarded-at"),
            audit=k.bucket_audit,
            lane_holders=k.lane_holders,
            event_id=event_id,
            reason=reason,
            now_ms=now_ms(),
            window_s=settings.dedupe_window_s,
            audit_max_len=AUDIT_MAXLEN,
            run_index_max=settings.run_index_max,
            lane_ttl_s=settings.idempotency_ttl_s,
            actor=actor,
        )
        for event_id, k in zip(event_ids, located, strict=True)
    ]
    replies = store.scripts.run_batch(calls)
    discarded = [e for e, ok in zip(event_ids, replies, strict=True) if int(ok) == 1]
    for event_id in discarded:  # the script wrote each entry to its bucket's stream
        log_audit(tenant.tenant, "discard", actor, eventId=event_id)
    return discarded, [e for e, ok in zip(event_ids, replies, strict=True) if int(ok) != 1]


class BadDlqCursor(ValueError):
    """A DLQ cursor that is not one (the message says what one is)."""


@dataclass(frozen=True, slots=True)
class DlqPage:
    """One page of the dead (or discarded) events, latest first, the list's ``total``, and ``cursor`` while
    more follow (:func:`dlq_page`)."""

    events: list[dict[str, Any]]
    total: int
    cursor: str | None

    def to_json_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"events": self.events, "total": self.total}
        if self.cursor is not None:
            body["cursor"] = self.cursor
        return body


DLQ_CURSOR = re.compile(r"([0-9]{1,16}):(.+)", re.ASCII | re.DOTALL)  # a page's last entry: <ms>:<eventId>


def parse_dlq_cursor(cursor: str) -> tuple[float, str]:
    """A DLQ cursor (``<ms>:<eventId>``, a page's last entry) as that entry; BadDlqCursor otherwise."""
    found = DLQ_CURSOR.fullmatch(cursor)
    if found is None:
        raise BadDlqCursor("cursor must be a page's cursor (<ms>:<eventId>)")
    return float(found.group(1)), found.group(2)


def dlq_page(
    store: EventStore,
    tenant: Keys,
    *,
    state: Literal["dead", "discarded"] = "dead",
    offset: int = 0,
    limit: int = 50,
    cursor: str | None = None,
) -> DlqPage:
    """Dead events (latest death first) or discarded ones (latest discard first), from ``offset`` or after
    ``cursor`` (a page's: whatever died or left meanwhile moves no page); the page's cursor, the last entry read
    (whether or not its event is still stored), is set when one more entry follows it."""
    before = None if cursor is None else parse_dlq_cursor(cursor)
    index: Callable[[BucketKeys], str]
    records: Callable[[list[tuple[str, float, BucketKeys]]], list[dict[str, Any]]]
    if state == "discarded":
        index, records = discarded_index, partial(discarded_records, store)
    else:
        index, records = dlq_index, store.dlq_records
    entries = store.newest_of(tenant, index, offset, limit + 1, before=before)
    shown = entries[:limit]
    following = f"{shown[-1][1]:.0f}:{shown[-1][0]}" if len(entries) > limit else None
    return DlqPage(records(shown), store.index_size(tenant, index), following)


def discarded_index(k: BucketKeys) -> str:
    """The index of discarded events, scored by when they were discarded."""
    return k.runs("discarded-at")


def discarded_records(store: EventStore, latest: list[tuple[str, float, BucketKeys]]) -> list[dict[str, Any]]:
    """The discarded events of index entries (``EventStore.newest_of``'s), those still stored as discarded."""
    pipe = store.client.pipeline(transaction=False)
    for event_id, _, k in latest:
        pipe.hgetall(k.event(event_id))
    out: list[dict[str, Any]] = []
    for (event_id, _, _), reply in zip(latest, pipe.execute(), strict=True):
        raw = {str(k): str(v) for k, v in reply.items()}
        if raw.get("state") != "discarded":
            continue  # expired, or since replayed by its producer as a new event
        record = status_record(raw, event_id)
        record.pop("attemptsHistory", None)
        record.update(reason=raw.get("discardReason", ""), at=int(raw.get("discardedAt", 0)))
        body = body_of(raw, event_id)
        if body is not None:
            record["event"] = body
        out.append(record)
    return out
