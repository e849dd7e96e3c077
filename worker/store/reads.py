"""The event store's reads: events, chains, counters, scopes and dead letters of a tenant (its key builder, passed in).

With scope buckets (worker/keys/buckets.py) a tenant's indexes are per bucket, so each read here fans out over
the buckets in one pipelined round trip (a cluster client groups it by node) and merges: counters are
summed, scopes united, dead letters merged by death time. An event or chain found by its id alone is looked up
in every bucket (:meth:`StoreReads.locate`). With one bucket each read is the single command it always was.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from redis import Redis

from worker.documents.chain_codec import decode_chain
from worker.documents.chain_storage import rebuilt_chain, stored_event_id, stored_source
from worker.documents.event_body import body_of, stored_body
from worker.documents.event_records import LIST_FIELDS, source_digest, status_record
from worker.keys.layout import BucketKeys, Keys
from worker.settings import Settings
from worker.store.quotas import (
    retained_counts,
    retained_refusal,
    retained_unit_bytes,
    retained_units,
    stored_bytes_refusal,
)
from worker.store.records import PreparedEvent, to_str

__all__ = [
    "CHAIN_ID_PREFIX",
    "EVENT_ID",
    "StoreReads",
    "chain_owner",
    "dlq_index",
    "newest_first",
    "str_dict",
]

CHAIN_ID_PREFIX = "chain:"  # LobeHub's chain id of a root event: chain:<sourceId>
EVENT_ID = re.compile(r"evt_[0-9a-f]{24}")  # worker/core/dedupe.py event_id_for
READY_READ_BATCH = 5_000  # refs of a ready list read per LRANGE (a list of 50,000 is ten reads)


def str_dict(raw: Any) -> dict[str, str]:
    return {to_str(k): to_str(v) for k, v in raw.items()}


class StoreReads:
    """Reads of :class:`worker.store.events.EventStore` (a mixin: the store gives ``client`` and ``settings``; each read names its tenant by its key builder)."""

    client: Redis
    settings: Settings

    def locate(self, k: Keys, event_id: str, *, in_dlq: bool = False) -> BucketKeys:
        """The key builder of ``k``'s tenant's bucket that holds ``event_id``: its record's, else (``in_dlq``:
        redrive and discard, which drop a stale entry whose record is gone) the one whose DLQ still names it,
        else the first bucket."""
        every = k.every_bucket()
        if len(every) == 1:
            return every[0]
        pipe = self.client.pipeline(transaction=False)
        for k in every:
            pipe.exists(k.event(event_id))
        found = [k for k, n in zip(every, pipe.execute(), strict=True) if int(n)]
        if found or not in_dlq:
            return found[0] if found else every[0]
        for k in every:
            pipe.zscore(k.dlq, event_id)
        listed = [k for k, score in zip(every, pipe.execute(), strict=True) if score is not None]
        return listed[0] if listed else every[0]

    def get_event(self, k: Keys, event_id: str) -> dict[str, Any] | None:
        """The event's public status record, or None when unknown (or expired)."""
        raw = str_dict(self.client.hgetall(self.locate(k, event_id).event(event_id)))
        if not raw:
            return None
        return status_record(raw, event_id)

    def chain_of(self, k: Keys, event_id: str) -> dict[str, Any] | None:
        """The chain document of one event's run, or None (not run yet, or past retention). The stored form
        is bytes (see :mod:`worker.chain.chain_document`): read with ``NEVER_DECODE``, so this decoding client hands
        them over untouched (no second client, no base64 in Redis)."""
        raw = self.get_bytes(self.locate(k, event_id).chain(event_id))
        return None if raw is None else rebuilt_chain(decode_chain(raw), event_id)

    def body_in_chain(self, b: BucketKeys, event_id: str) -> str | None:
        """The stored body (worker/documents/event_body.py) of a done event, read from its chain: its commit
        dropped it from the event's hash, since the chain holds its source and outlives the hash (issue 29).
        None when there is no chain (expired, erased) or none readable. ``b``: the event's bucket (located)."""
        raw = self.get_bytes(b.chain(event_id))
        try:
            return (
                None
                if raw is None
                else stored_body(stored_source(decode_chain(raw), event_id).to_json_dict())
            )
        except ValueError:
            return None

    def chain_runs(self, k: Keys, chain_id: str, *, user_id: str | None = None) -> list[dict[str, Any]]:
        """The status records of the events whose run is LobeHub's chain ``chain_id`` (``chain:<sourceId>``:
        every event of that source id, in any scope, of any user), newest first; ``user_id`` narrows them to
        one user's."""
        source_id = chain_id.removeprefix(CHAIN_ID_PREFIX)
        if source_id == chain_id or not source_id:
            return []
        runs = [r for r in self.find_by_source(k, source_id) if r.get("chainId") == chain_id]
        return [r for r in runs if user_id is None or r.get("userId") == user_id]

    def get_chain(self, k: Keys, chain_id: str, *, user_id: str | None = None) -> dict[str, Any] | None:
        """The chain document of the newest run of ``chain_id`` (``user_id``'s when given), or of the event
        when ``chain_id`` is an event id; None when unknown (or expired). A chain stored before chains were
        kept per event (under its chain id) is still read."""
        if EVENT_ID.fullmatch(chain_id):
            return self.chain_of(k, chain_id)
        for run in self.chain_runs(k, chain_id, user_id=user_id):
            found = self.chain_of(k, str(run["eventId"]))
            if found is not None:
                return found
        raw = None if user_id is not None else self._legacy_chain_bytes(k, chain_id)
        return None if raw is None else rebuilt_chain(decode_chain(raw))

    def _legacy_chain_bytes(self, k: Keys, chain_id: str) -> bytes | None:
        """A chain stored under its chain id before chains were kept per event (the upgrade path,
        docs/operations.md); with scope buckets, the bucket's whose event wrote it last."""
        every = k.every_bucket()
        pipe = self.client.pipeline(transaction=False)
        for b in every:
            pipe.execute_command("GET", b.chain(chain_id), NEVER_DECODE=[])  # type: ignore[no-untyped-call]
        copies = [(b, raw) for b, raw in zip(every, pipe.execute(), strict=True) if raw is not None]
        if len(copies) <= 1:
            return copies[0][1] if copies else None

        def written_at(copy: tuple[BucketKeys, bytes]) -> int:
            event_id = chain_owner(copy[1])
            return int(self.client.hget(copy[0].event(event_id), "doneAt") or 0) if event_id else -1

        newest: bytes = max(copies, key=written_at)[1]
        return newest

    def get_bytes(self, key: str) -> bytes | None:
        """A string value as stored (chains and lanes are binary): ``NEVER_DECODE`` on this decoding client."""
        raw: bytes | None = self.client.execute_command("GET", key, NEVER_DECODE=[])  # type: ignore[no-untyped-call]
        return raw

    def records(self, entries: Sequence[tuple[str, BucketKeys]]) -> list[dict[str, Any] | None]:
        """The listing records (:data:`~worker.documents.event_records.LIST_FIELDS`) of ``(eventId, its bucket)`` pairs,
        in one pipelined round trip; None for an entry whose event expired (a stale index entry)."""
        pipe = self.client.pipeline(transaction=False)
        for member, k in entries:
            pipe.hmget(k.event(member), list(LIST_FIELDS))
        out: list[dict[str, Any] | None] = []
        for (member, _), values in zip(entries, pipe.execute(), strict=True):
            raw = {name: to_str(v) for name, v in zip(LIST_FIELDS, values, strict=True) if v is not None}
            out.append(status_record(raw, member) if raw.get("state") else None)
        return out

    def find_by_source(self, k: Keys, source_id: str) -> list[dict[str, Any]]:
        """``k``'s tenant's stored events with this source id (any scope, any source type), newest first."""
        digest = source_digest(source_id)
        entries: list[tuple[str, BucketKeys]] = []
        for b in k.every_bucket():
            index = self.client.zscan_iter(b.events_of_source(digest), match=f"{digest}:*", count=500)
            ids = sorted({to_str(member).partition(":")[2] for member, _ in index})
            entries += [(event_id, b) for event_id in ids]
        found = [r for r in self.records(entries) if r is not None and r.get("sourceId") == source_id]
        return sorted(found, key=lambda r: (r["enqueuedAt"], r["eventId"]), reverse=True)

    def stats(self, k: Keys) -> dict[str, int]:
        """``k``'s tenant's counters (summed over its buckets)."""
        pipe = self.client.pipeline(transaction=False)
        for b in k.every_bucket():
            pipe.hgetall(b.stats)
        total: dict[str, int] = {}
        for reply in pipe.execute():
            for name, value in str_dict(reply).items():
                total[name] = total.get(name, 0) + int(value)
        return total

    def limits_refusal(self, k: Keys, events: Sequence[PreparedEvent]) -> str | None:
        """With scope buckets, a batch's limits read before any bucket's script writes (each script checks its
        own inboxes again): the OVERLIMIT reply the scripts would give, or None. The tenant's queued events are
        summed over the buckets, and so are its retained events; the users' and the tenant's stored bytes are read
        from their home slot; each inbox's depth is read."""
        settings = self.settings
        if settings.tenant_max_queued:
            queued = self.stats(k).get("queued", 0)
            if queued + len(events) > settings.tenant_max_queued:
                return f"OVERLIMIT tenant {queued}"
        if settings.tenant_max_events:
            quota, window_s, every = settings.tenant_max_events, settings.dedupe_window_s, k.every_bucket()
            unit_bytes = retained_unit_bytes(settings)
            units = [retained_units(ev.body, unit_bytes) for ev in events]
            refusal = retained_refusal(self.client, every, sum(units), quota, window_s)
            if refusal is not None:  # a duplicate stores nothing: count only the new events
                fresh = sum(n for n, new in zip(units, self._fresh(k, events), strict=True) if new)
                refusal = retained_refusal(self.client, every, fresh, quota, window_s)
            if refusal is not None:
                return refusal
        refusal = self._user_events_refusal(k, events)
        if refusal is not None:
            return refusal
        refusal = stored_bytes_refusal(self.client, settings, k, self.users_of(events))
        if refusal is not None:
            return refusal
        if settings.max_inbox_depth:
            adding: dict[str, int] = {}
            for ev in events:
                adding[ev.scope_key] = adding.get(ev.scope_key, 0) + 1
            pipe = self.client.pipeline(transaction=False)
            for scope in adding:
                pipe.llen(k.inbox(scope))
            for (scope, n), depth in zip(adding.items(), pipe.execute(), strict=True):
                if int(depth) + n > settings.max_inbox_depth:
                    return f"OVERLIMIT inbox {k.scope_ref(scope)} {depth}"
        return None

    def _user_events_refusal(self, k: Keys, events: Sequence[PreparedEvent]) -> str | None:
        """Each user's share of the retained events (``user_max_events``), summed over the buckets in one
        pipeline, with the batch's events naming them (only new ones, asked only of a user it would refuse): the
        first OVERLIMIT userevents reply, or None."""
        settings = self.settings
        users = self.users_of(events) if settings.user_max_events else []
        if not users:
            return None
        unit_bytes, every = retained_unit_bytes(settings), k.every_bucket()
        units = [retained_units(ev.body, unit_bytes) for ev in events]
        held = retained_counts(
            self.client,
            [[b.retained_user_events(user) for b in every] for user in users],
            settings.dedupe_window_s,
        )
        positions: dict[str, list[int]] = {}  # each user's events, in one pass over the batch
        for i, ev in enumerate(events):
            if ev.user_id:
                positions.setdefault(ev.user_id, []).append(i)
        fresh: list[bool] | None = None
        for place, (user, (total, retry_s)) in enumerate(zip(users, held, strict=True), start=1):
            mine = positions[user]
            if total + sum(units[i] for i in mine) <= settings.user_max_events:
                continue
            fresh = self._fresh(k, events) if fresh is None else fresh  # a duplicate stores nothing
            adding = sum(units[i] for i in mine if fresh[i])
            if total + adding > settings.user_max_events:
                alone = adding > settings.user_max_events  # waiting does not help
                return f"OVERLIMIT userevents {place} {total} {0 if alone else retry_s}"
        return None

    def _fresh(self, k: Keys, events: Sequence[PreparedEvent]) -> list[bool]:
        """Whether each of ``events`` is not stored yet (each looked up in its scope's bucket)."""
        pipe = self.client.pipeline(transaction=False)
        for ev in events:
            pipe.exists(k.for_scope(ev.scope_key).event(ev.event_id))
        return [not int(n) for n in pipe.execute()]

    @staticmethod
    def users_of(events: Sequence[PreparedEvent]) -> list[str]:
        """The distinct users a batch names, in the order the quota checks read them."""
        return sorted({ev.user_id for ev in events if ev.user_id})

    def active_scopes(self, k: Keys) -> list[str]:
        """``k``'s tenant's scopes with queued work, paused ones not among them (bare scope keys)."""
        mine = k.scope_ref("")
        return sorted(ref[len(mine) :] for ref in self.scope_refs_of(k) if ref.startswith(mine))

    def scope_refs_of(self, keys: Keys) -> list[str]:
        """The scope refs in ``keys``' tenant's scopes registries (every bucket's)."""
        pipe = self.client.pipeline(transaction=False)
        for b in keys.every_bucket():
            pipe.smembers(b.scopes)
        return [to_str(x) for members in pipe.execute() for x in members]

    def ready_refs(self, k: Keys) -> set[str]:
        """The scope refs waiting in ``k``'s tenant's fair-share ready list (worker/runtime/fair.py) for a
        drain_next message to pop them: none while the tenant is not on the ring of tenants with ready scopes,
        since no pop reaches its list then (every push puts it there; an operator's ``DEL`` or a lost key could
        take it off). Read :data:`READY_READ_BATCH` refs at a time, so a long list never answers in one reply;
        pops at its head meanwhile shift the rest, so a ref can be missed (never one named that is not there):
        a caller treats a missed ref as not waiting, which is what it did before it asked. With fair share off
        no message pops a list: none."""
        if not self.settings.fair_share or self.client.lpos(k.ready_tenants, k.tenant) is None:
            return set()
        found: set[str] = set()
        start = 0
        while True:
            batch = self.client.lrange(k.ready(k.tenant), start, start + READY_READ_BATCH - 1)
            found.update(to_str(ref) for ref in batch)
            if len(batch) < READY_READ_BATCH:
                return found
            start += READY_READ_BATCH

    def newest_of(
        self,
        k: Keys,
        index: Callable[[BucketKeys], str],
        offset: int,
        limit: int,
        *,
        before: tuple[float, str] | None = None,
    ) -> list[tuple[str, float, BucketKeys]]:
        """One page of a per-bucket index (a zset scored by time), newest first over every bucket: (member,
        score, the bucket's key builder). With one bucket, that page of the one index. ``before`` (a cursor: an
        entry's score and member) starts the page after that entry instead of at ``offset``: entries added or
        removed meanwhile move no page."""
        every = k.every_bucket()
        if before is not None:
            return self._older_than(every, index, before, limit)
        start = offset if len(every) == 1 else 0
        pipe = self.client.pipeline(transaction=False)
        for b in every:
            pipe.zrevrange(index(b), start, offset + limit - 1, withscores=True)
        found = [
            (to_str(m), float(at), b)
            for b, reply in zip(every, pipe.execute(), strict=True)
            for m, at in reply
        ]
        if len(every) == 1:
            return found
        return sorted(found, key=lambda e: newest_first(e[0], e[1]))[offset : offset + limit]

    def _older_than(
        self,
        every: list[BucketKeys],
        index: Callable[[BucketKeys], str],
        before: tuple[float, str],
        limit: int,
    ) -> list[tuple[str, float, BucketKeys]]:
        """Up to ``limit`` entries after ``before`` in newest-first order over the buckets' indexes (a lower
        score, or the same score and a smaller member, as ZREVRANGE orders them): one pipelined read of every
        bucket, and another only for a bucket whose full read held entries at or before the cursor."""
        score, member = before
        cut = member.encode("utf-8")
        kept: list[list[tuple[str, float, BucketKeys]]] = [[] for _ in every]
        read = [0] * len(every)
        pending = list(range(len(every)))
        while pending:
            pipe = self.client.pipeline(transaction=False)
            for i in pending:
                pipe.zrevrangebyscore(
                    index(every[i]), score, "-inf", start=read[i], num=limit, withscores=True
                )
            short = []
            for i, reply in zip(pending, pipe.execute(), strict=True):
                read[i] += len(reply)
                for raw, at in reply:
                    found = to_str(raw)
                    if float(at) < score or found.encode("utf-8") < cut:
                        kept[i].append((found, float(at), every[i]))
                if len(reply) == limit and len(kept[i]) < limit:
                    short.append(i)
            pending = short
        merged = [entry for entries in kept for entry in entries[:limit]]
        return sorted(merged, key=lambda e: newest_first(e[0], e[1]))[:limit]

    def dlq_list(self, k: Keys, *, offset: int = 0, limit: int = 100) -> list[dict[str, Any]]:
        """``k``'s tenant's dead events, most recent death first, each with payload, attempts and last error."""
        return self.dlq_records(self.newest_of(k, dlq_index, offset, limit))

    def dlq_records(self, page: list[tuple[str, float, BucketKeys]]) -> list[dict[str, Any]]:
        """The dead events of DLQ entries (:meth:`newest_of`'s), those still stored."""
        pipe = self.client.pipeline(transaction=False)
        for event_id, _, b in page:
            pipe.hgetall(b.event(event_id))
        out = []
        for (event_id, _, _), reply in zip(page, pipe.execute(), strict=True):
            if reply:
                raw = str_dict(reply)
                record = status_record(raw, event_id)
                record["event"] = body_of(raw, event_id)
                record["deadAt"] = int(raw.get("deadAt", 0))
                out.append(record)
        return out

    def dlq_size(self, k: Keys) -> int:
        return self.index_size(k, dlq_index)

    def index_size(self, k: Keys, index: Callable[[BucketKeys], str]) -> int:
        """The entries of a per-bucket index over every bucket, in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for b in k.every_bucket():
            pipe.zcard(index(b))
        return sum(int(n) for n in pipe.execute())

    def dlq_ids(self, k: Keys, limit: int | None = None, *, until_ms: int | None = None) -> list[str]:
        """The tenant's dead event ids, the longest dead first (merged over its buckets by time of death); with
        ``limit``, at most that many; with ``until_ms``, only those dead by then."""
        pipe = self.client.pipeline(transaction=False)
        top = "+inf" if until_ms is None else until_ms
        for b in k.every_bucket():
            pipe.zrangebyscore(
                b.dlq, "-inf", top, start=None if limit is None else 0, num=limit, withscores=True
            )
        found = pipe.execute()
        entries = sorted((float(score), to_str(member)) for ids in found for member, score in ids)
        return [member for _, member in (entries if limit is None else entries[:limit])]


def dlq_index(b: BucketKeys) -> str:
    """A bucket's dead-letter list: dead events scored by when they died."""
    return b.dlq


def newest_first(member: str, score: float) -> tuple[float, tuple[int, ...]]:
    """A sort key over entries of several zsets: the highest score first and, within one score, the larger
    member first (one zset's ZREVRANGE order)."""
    return -score, (*(-b for b in member.encode("utf-8")), 1)


def chain_owner(raw: bytes | None) -> str | None:
    """The id of the event whose run wrote a stored chain (None: no chain, or none readable)."""
    try:
        return None if raw is None else stored_event_id(decode_chain(raw))
    except ValueError:
        return None
