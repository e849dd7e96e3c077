"""Erasure: remove everything a tenant stores about one user (``DELETE /v1/users/{userId}``).

Every key that holds a user's data is found from the tenant and the user, by design (``worker/keys/layout.py``):

* the engine's user-keyed families: receipts (bodies and indexes), conversations, the user's conversation and
  session indexes, and the count of their stored bytes (worker/store/quotas.py: their storage quota starts
  again at 0); then each plugin's part (``Plugin.erase_user``: self-iteration drops memories, skills and their
  versions, the feature override, review guards, judge diagnostics and the per-scope records naming the user,
  policies/self_iteration/erasure.py);
* the user's events: those of their index ``events-of:user:U`` (written with each event, for the dedupe
  window), their dead ones (the DLQ keeps them past it) and any of theirs still waiting in the inbox of one of
  their scopes. Each becomes a tombstone that keeps its id (so a replay of it is still a duplicate), status,
  attempt count and times, and loses its payload, user, scope and source ids; one that had not ended, or was
  dead, becomes ``erased``. Its chain document and outbox records go (the chain of an indexed event whose record
  has expired too), and the idempotency lanes of the actions its chain holds (a lane outlives its event, and a
  receipt's lane key names the user: ``receipt:<userId>:…``, even in a scope others share). A tombstone also
  stops a run its chain asked for that is still queued or running (the self-iteration plugin reads it:
  policies/self_iteration/origin.py);
* the user's scopes: those of their events, of their sessions, and every scope whose ``scope-users:{scope}``
  names them (that set has no TTL, so the scopes are found after the user's events and index have expired, with
  what hangs off them for longer: fences, counters, idempotency lanes, outbox records, plugin records). A scope
  whose events were all this user's is dropped whole (inbox, lease/fence counters, idempotency lanes, plugin
  data, procedure records, outbox…, and its entry in the tenant's fair-share ready list); a scope shared with
  other users keeps its data, loses the user's events and the user's name. A session's settings decide over who sent its events: a session that names this user
  loses its session data (context, checkpoints, usage, D-Mail, settings, function state) even where others'
  events ran in its scope, and a session that names another user is never dropped (it may have been this
  user's before a key gave it to someone else).

One erasure runs at a time per tenant (its lock, worker/ops/erasure_holds.py: a second one meanwhile raises
:class:`ErasureRunning`). Each scope is erased under its lease, taken with the erasure's own token (ERASE_HOLD: a
new fencing number, so a drain whose lease ran out earlier cannot write after us) and held until the scope's part
and the plugins' parts are done: no drain starts there meanwhile. Whole or shared is decided at the write
(ERASE_SCOPE, one script that tombstones the scope's events of the user and drops or keeps the scope): an event of
another user enqueued after we looked keeps the scope. A scope whose lease a drain holds is left alone and reported in
``busyScopes``: an event of it is running. Erasure is idempotent, so the caller repeats it until
``busyScopes`` is 0. Each run is audited in the tenant's audit stream, with its actor, under the user's pseudonym, a
keyed hash (worker/telemetry/pseudonyms.py): the audit must not keep the id, nor a hash anyone could compute from a
guess.

Not found once the dedupe window has passed since the user's last event: the chain documents of their events
whose records have expired (chain retention), and with them the idempotency lanes of those chains' actions in
scopes shared with other users (a lane is found through its chain), their outbox records in such scopes (the
event index that names them lives a window), and the tombstone that stops a run still in flight
(docs/security.md).
"""

from __future__ import annotations

import json
import logging
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import zstandard
from redis import Redis

from worker.core.clock import now_ms
from worker.core.idempotency import (
    LANE_FORM,
    TYPED_LANES_FIELD,
    idempotency_key_for,
    is_user_form,
    lane_form_of,
)
from worker.documents.chain_codec import decode_chain
from worker.documents.chain_storage import stored_actions
from worker.keys.layout import BucketKeys, Keys, glob_escaped
from worker.ops.audit import CLI_ACTOR, audit
from worker.ops.erasure_holds import HOLDER, ErasureHolds, ErasureRunning
from worker.ops.erasure_index import CHUNK, UserEvent, forget_indexed, queued_events, text, user_events
from worker.store.calls import (
    ErasedEvent,
    ErasedLane,
    ErasedRecord,
    EraseScope,
    ForgetUserBytes,
    ForgottenSession,
)
from worker.store.events import EventStore
from worker.store.reads import chain_owner
from worker.store.server.client import is_cluster
from worker.telemetry.pseudonyms import load_pseudonyms

__all__ = ["HOLDER", "ErasureReport", "ErasureRunning", "UserEraser", "erase_user"]

SCAN_COUNT = 500
# What reading a stored chain raises when it does not read: its codec's ValueError (zlib's and zstd's errors become
# one: worker/documents/chain_codec.py; named too, should one get through), json's RecursionError (nested too deep),
# and the rebuild's when the parts are not the shapes it reads. Such a chain names no lane; the erasure goes on.
_CODEC_ERRORS = (zlib.error, zstandard.ZstdError)
_UNREADABLE = (ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError, *_CODEC_ERRORS)
UNREADABLE_LOG = "erasure: a stored chain does not read (%s); its lanes are not known"  # its kind: no user
log = logging.getLogger(__name__)


@dataclass(slots=True)
class ErasureReport:
    user_id: str
    removed: Counter[str] = field(default_factory=Counter)
    busy_scopes: list[str] = field(default_factory=list)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "userId": self.user_id,
            "removed": dict(sorted(self.removed.items())),
            "busyScopes": len(self.busy_scopes),
        }


UserEraser = Callable[[Redis, Keys, str, frozenset[str]], Mapping[str, int]]
"""A plugin's part of an erasure (``Plugin.erase_user``): given the client, the tenant's keys, the user and the
scopes of the user's events and sessions (not busy; the erasure still holds their leases), delete what the
plugin stores of that user and return the counts by kind (they join the report's ``removed``). It runs after the
engine's part; it must be idempotent."""


def erase_user(
    store: EventStore,
    tenant: Keys,
    user_id: str,
    *,
    session_scope: Callable[[str], str],
    erasers: Sequence[UserEraser] = (),
    actor: str = CLI_ACTOR,
) -> ErasureReport:
    """Erase ``user_id`` in ``tenant`` (see the module docstring), with each loaded plugin's ``erasers``;
    returns what was removed. One erasure runs at a time per tenant: raises :class:`ErasureRunning` while another
    holds the tenant's lock (worker/ops/erasure_holds.py)."""
    report = ErasureReport(user_id)
    holds = ErasureHolds(store, tenant, report.busy_scopes)
    holds.lock()
    try:
        _erase(store, tenant, user_id, holds, report, session_scope, erasers)
        audit(
            store.client,
            tenant,
            "audit",
            "erase-user",
            actor,
            user=load_pseudonyms(store.client, store.settings).of(user_id),
            removed=json.dumps(report.to_json_dict()["removed"]),
        )
    finally:
        holds.unlock()
    return report


def _erase(
    store: EventStore,
    tenant: Keys,
    user_id: str,
    holds: ErasureHolds,
    report: ErasureReport,
    session_scope: Callable[[str], str],
    erasers: Sequence[UserEraser],
) -> None:
    """The erasure itself, under the tenant's lock: the engine's part under the scopes' leases, then the plugins'."""
    events, indexed = user_events(store, tenant, user_id)  # each entry read leaves the index at the end
    sessions = sorted(text(x) for x in store.client.smembers(tenant.user_sessions(user_id)))
    scopes = {e.scope for e in events.values() if e.scope} | {session_scope(s) for s in sessions}
    scopes |= _scopes_naming(store, tenant, user_id, holds)
    try:
        holds.take(scopes)
        queued_events(store, tenant, user_id, holds.held, events)
        tagged = _tagged_keys(store, tenant, holds)
        owned, may_drop = _classify(store, tenant, user_id, holds.held)
        whole: list[str] = []
        for scope in list(holds.held):
            mine = _claim(events, tenant, scope, tagged.get(scope, ()))
            if _erase_scope(store, tenant, user_id, scope, mine, scope in may_drop, holds, report):
                whole.append(scope)
                _drop_scope_keys(store, tenant, scope, tagged.get(scope, ()), holds, report)
        _drop_expired_chains(store, tenant, events, report)
        holds.keep_alive()
        # under the leases: no action of the user writes now
        _drop_user_keyed(store, tenant, user_id, report, session_scope, holds)
        _drop_sessions(store, tenant, [scope for scope in owned if scope not in whole], report)
        for erase in erasers:  # what the plugins store of the user (their families, their rules)
            holds.keep_alive()
            report.removed.update(erase(store.client, tenant, user_id, frozenset(holds.held)))
    finally:
        holds.release()
    if not report.busy_scopes:
        erased = {*indexed, *((e.event_id, e.bucket) for e in events.values())}
        forget_indexed(store, tenant, user_id, erased, sessions)


def _scan(store: EventStore, match: str, holds: ErasureHolds) -> Iterator[str]:
    """The keys matching ``match``: one SCAN walk of the keyspace (MATCH filters, it does not bound the walk), of
    each primary in turn on a Redis Cluster (its SCAN answers a cursor per node). The lock and the leases are kept
    alive at every page, not at every key found (so not ``scan_iter``): a page may hold none, and a walk that finds
    little is as long."""
    client = store.client
    cluster: Any = client if is_cluster(client) else None  # a RedisCluster: its SCAN targets nodes
    nodes: list[Any] = [None] if cluster is None else cluster.get_primaries()
    for node in nodes:
        cursor = 0
        while True:
            if cluster is None:
                cursor, found = client.scan(cursor, match=match, count=SCAN_COUNT)
            else:
                cursors, found = cluster.scan(cursor, match=match, count=SCAN_COUNT, target_nodes=node)
                cursor = cursors[node.name]
            yield from (text(raw) for raw in found)
            holds.keep_alive()
            if not cursor:
                break


def _scopes_naming(store: EventStore, tenant: Keys, user_id: str, holds: ErasureHolds) -> set[str]:
    """Every scope whose users (``scope-users:{scope}``, no TTL) name the user: one SCAN of that family per
    bucket."""
    candidates: list[tuple[str, str]] = []
    for k in tenant.every_bucket():
        start = k.scope_users_prefix
        for key in _scan(store, glob_escaped(start) + "*", holds):
            if key.endswith("}"):
                candidates.append((key, key[len(start) : -1]))
    found: set[str] = set()
    for begin in range(0, len(candidates), CHUNK):
        chunk = candidates[begin : begin + CHUNK]
        pipe = store.client.pipeline(transaction=False)
        for key, _ in chunk:
            pipe.sismember(key, user_id)
        found |= {scope for (_, scope), named in zip(chunk, pipe.execute(), strict=True) if named}
    return found


def _scope_tag(key: str) -> str | None:
    """The scope a key is tagged with (``family:{scope}…`` after the tenant's own tag), or None."""
    start = key.find("}:")
    i = key.find("{", start + 2) if start >= 0 else -1
    j = key.find("}", i + 1) if i >= 0 else -1
    return key[i + 1 : j] if j > i else None


def _tagged_keys(store: EventStore, tenant: Keys, holds: ErasureHolds) -> dict[str, list[str]]:
    """Every key of the held scopes (one SCAN over the tenant), by scope; the leases kept alive meanwhile."""
    wanted = set(holds.held)
    out: dict[str, list[str]] = {}
    if not wanted:
        return out
    for key in _scan(store, tenant.tenant_pattern, holds):
        scope = _scope_tag(key)
        if scope in wanted:
            out.setdefault(scope, []).append(key)
    return out


def _classify(store: EventStore, tenant: Keys, user_id: str, scopes: list[str]) -> tuple[list[str], set[str]]:
    """(scopes whose session names this user, scopes that may be dropped whole: no session there names another
    user). Whether the scope's events are all this user's is ERASE_SCOPE's to say, at the write."""
    pipe = store.client.pipeline(transaction=False)
    for scope in scopes:
        pipe.hget(tenant.session(scope), "userId")
    owners = [None if o is None else text(o) for o in pipe.execute()]
    owned = [scope for scope, owner in zip(scopes, owners, strict=True) if owner == user_id]
    may_drop = {scope for scope, owner in zip(scopes, owners, strict=True) if owner in (None, user_id)}
    return owned, may_drop


def _claim(events: dict[str, UserEvent], tenant: Keys, scope: str, tagged: Iterable[str]) -> list[UserEvent]:
    """The user's events of ``scope``: those whose record names it, and expired ones whose outbox index is one
    of its keys (their record is gone, the index is not)."""
    k = tenant.for_scope(scope)
    start = k.outbox_of_event(scope, "")
    for key in tagged:
        if key.startswith(start):
            event = events.get(key[len(start) :])
            if event is not None and not event.scope and event.bucket == k.bucket:
                event.scope = scope
    return [e for e in events.values() if e.scope == scope]


def _erase_scope(
    store: EventStore,
    tenant: Keys,
    user_id: str,
    scope: str,
    events: list[UserEvent],
    may_drop: bool,
    holds: ErasureHolds,
    report: ErasureReport,
) -> bool:
    """ERASE_SCOPE for ``scope``, a chunk of events at a time (all but the last chunk shared: the last decides
    whole or shared); True when the scope was dropped whole. A lease found gone makes the scope busy."""
    k = tenant.for_scope(scope)
    # a chain stored under its chain id before chains were kept per event: when this event wrote it, the script
    # deletes it with the event (a lease lost keeps it, and its actions' lanes, which go with the first chunk)
    lanes: list[str] = []
    legacy: dict[str, str] = {}
    for e, raw in _legacy_chains(store, k, events):
        if _chain_owner(raw) == e.event_id:  # an event of before typed lanes
            lanes += _chain_lanes(tenant, scope, raw, e.event_id, form=0)[0]
            legacy[e.event_id] = k.chain(e.chain_id)
    chunks = [events[i : i + CHUNK] for i in range(0, len(events), CHUNK)] or [[]]
    for n, chunk in enumerate(chunks):
        records, chained = _chunk_reads(store, tenant, scope, chunk)
        lanes = sorted({*lanes, *chained})
        last = n == len(chunks) - 1
        reply = store.durable(
            EraseScope(
                **_scope_keys(k, scope),
                token=holds.token,
                user_id=user_id,
                scope_key=scope,
                scope_ref=k.scope_ref(scope),
                ev_prefix=k.event_prefix,
                now_ms=now_ms(),
                window_s=store.settings.dedupe_window_s,
                may_drop=int(may_drop and last),
                event_count=len(chunk),
                last=int(last),
                lane_count=len(lanes),
                events=[
                    ErasedEvent(
                        k.event(e.event_id),
                        k.chain(e.event_id),
                        k.outbox_of_event(scope, e.event_id),
                        legacy.get(e.event_id, k.chain(e.event_id)),
                        e.event_id,
                    )
                    for e in chunk
                ],
                lanes=[ErasedLane(lane) for lane in lanes],
                records=records,
            )
        )
        if int(reply[0]) == -1:
            holds.lose(scope)
            return False
        lanes = []
        report.removed["eventPayloads"] += int(reply[1])
        report.removed["chains"] += int(reply[2])
        report.removed["lanes"] += int(reply[3])
        report.removed["outboxRecords"] += len(records)
        holds.keep_alive()
    if int(reply[0]) == 1:
        report.removed["scopes"] += 1
        return True
    return False


def _legacy_chains(
    store: EventStore, k: BucketKeys, events: list[UserEvent]
) -> Iterator[tuple[UserEvent, bytes | None]]:
    """Each event with a chain id, and what its chain id's key holds (a chain stored there before chains were kept
    per event, or nothing): one pipelined read per chunk, not a round trip per event."""
    named = [e for e in events if e.chain_id]
    for start in range(0, len(named), CHUNK):
        chunk = named[start : start + CHUNK]
        pipe = store.client.pipeline(transaction=False)
        for e in chunk:
            pipe.execute_command("GET", k.chain(e.chain_id), NEVER_DECODE=[])  # type: ignore[no-untyped-call]
        yield from zip(chunk, pipe.execute(), strict=True)


def _chunk_reads(
    store: EventStore, tenant: Keys, scope: str, chunk: list[UserEvent]
) -> tuple[list[ErasedRecord], list[str]]:
    """The chunk's outbox records, and the idempotency lanes of the actions its chains hold (one round trip)."""
    k = tenant.for_scope(scope)
    pipe = store.client.pipeline(transaction=False)
    for e in chunk:
        pipe.smembers(k.outbox_of_event(scope, e.event_id))
        pipe.execute_command("GET", k.chain(e.event_id), NEVER_DECODE=[])  # type: ignore[no-untyped-call]
        pipe.hmget(k.event(e.event_id), "state", TYPED_LANES_FIELD)
    found = pipe.execute()
    records = [
        ErasedRecord(k.outbox_record(scope, text(r)), text(r)) for members in found[0::3] for r in members
    ]
    lanes: list[str] = []
    maybe: list[str] = []
    for e, raw, fields in zip(chunk, found[1::3], found[2::3], strict=True):
        sure, before = _chain_lanes(tenant, scope, raw, e.event_id, form=_lane_form(fields))
        lanes += sure
        maybe += before
    return records, lanes + _unkept(store, maybe)


def _lane_form(fields: list[Any]) -> int | None:
    """The form of an event's lane keys, from its hash's ``state`` and ``typedLanes`` mark
    (:func:`~worker.core.idempotency.idempotency_key_for`): None when the hash is gone (:func:`_chain_lanes`)."""
    state, mark = fields
    if state is None:
        return None
    return lane_form_of(None if mark is None else text(mark))


def _chain_owner(raw: bytes | None) -> str | None:
    """The event that wrote a stored chain (:func:`chain_owner`); None when it does not read, however it fails."""
    try:
        return chain_owner(raw)
    except _UNREADABLE as exc:
        log.warning(UNREADABLE_LOG, type(exc).__name__)
        return None


def _chain_lanes(
    tenant: Keys, scope: str | None, raw: bytes | None, event_id: str, *, form: int | None = None
) -> tuple[list[str], list[str]]:
    """The idempotency lanes of the actions a stored chain holds, in ``scope`` (None: the scope its source
    names); none when the chain is gone or does not read (it is deleted all the same). ``form``: the form of the
    event's lane keys, its hash's mark. Returns the keys its lanes are under, and, when its hash is gone (``form``
    None: a done event past the dedupe window), its keys of the older forms too, which it may have used (a worker
    from before ran it) or another event may hold (of its scope and sourceId and another source type, or of its
    payload key and another user): those are deleted only while they have a TTL (:func:`_unkept`)."""
    if raw is None:
        return [], []
    try:
        source, actions = stored_actions(decode_chain(raw), event_id)
        if scope is None:
            if source is None:
                raise ValueError("a whole chain document of before keeps no source apart")
            scope = source.scope_key
    except _UNREADABLE as exc:
        log.warning(UNREADABLE_LOG, type(exc).__name__)
        return [], []
    k = tenant.for_scope(scope)
    user = source.user_id if source is not None else None

    def lanes_of(in_form: int, *, guessed: bool = False) -> set[str]:
        # a guessed older form leaves out a bare payload key shaped as a user's lane of today (u=<user>:…): theirs
        return {
            k.idempotency(scope, idempotency_key_for(a, form=in_form, user_id=user))
            for a in actions
            if not (guessed and is_user_form(str(a.payload.get("idempotencyKey") or "")))
        }

    if form is not None:
        return sorted(lanes_of(form)), []
    sure = lanes_of(LANE_FORM)
    return sorted(sure), sorted(set.union(*(lanes_of(old, guessed=True) for old in range(LANE_FORM))) - sure)


def _unkept(store: EventStore, lanes: list[str]) -> list[str]:
    """The lanes of ``lanes`` that have a TTL. One without is kept by an unfinished event (retrying, or dead
    until its redrive: worker/store/lua/lib/kept_lanes.lua), never by a done one, whose end gave its lanes their
    TTL back unless another held it: such a lane (under a key of before, or a key two events share) is another
    event's, and deleting it would apply its action again."""
    if not lanes:
        return []
    pipe = store.client.pipeline(transaction=False)
    for lane in lanes:
        pipe.pttl(lane)
    return [lane for lane, ttl_ms in zip(lanes, pipe.execute(), strict=True) if int(ttl_ms) > 0]


def _scope_keys(k: BucketKeys, scope: str) -> dict[str, str]:
    """ERASE_SCOPE's keys of ``scope`` (in its bucket ``k``)."""
    return {
        "lease": k.lease(scope),
        "scope_users": k.scope_users(scope),
        "inbox": k.inbox(scope),
        "sched": k.scheduled(scope),
        "seq": k.enqueue_seq(scope),
        "fence_key": k.fence(scope),
        "runs_scope": k.runs_of_scope(scope),
        "scopes": k.scopes,
        "paused": k.runs("paused"),
        "stats": k.stats,
        "dlq": k.dlq,
        "runs_active": k.runs("status", "active"),
        "runs_dead": k.runs("status", "dead"),
        "outbox_due": k.outbox_due,
        "journal_due": k.journal_due,
        "outbox_dead": k.outbox_dead,
        "lane_holders": k.lane_holders,
    }


def _drop_scope_keys(
    store: EventStore,
    tenant: Keys,
    scope: str,
    tagged: Iterable[str],
    holds: ErasureHolds,
    report: ErasureReport,
) -> None:
    """The rest of a scope ERASE_SCOPE dropped whole (lanes, outbox records, plugin data…, as one SCAN found
    them), deleted while the erasure still holds its lease (nothing else writes them then); the keys the script
    dropped are not touched again (an enqueue since may have made them anew). Due (and dead) outbox entries go first."""
    client, k = store.client, tenant.for_scope(scope)
    mine = set(_scope_keys(k, scope).values())
    doomed = [key for key in tagged if key not in mine]
    ref = k.scope_ref(scope)
    for due in (k.outbox_due, k.journal_due, k.outbox_dead):
        for member, _ in client.zscan_iter(due, match=glob_escaped(f"{ref}\x1f") + "*"):
            client.zrem(due, member)
    # Its entry in the tenant's fair-share ready list (the ref names the scope, and so a user-derived scope's
    # user): that list is tagged {fair}, another slot than the scope's keys on a Redis Cluster, so it is not
    # ERASE_SCOPE's to touch. Left when an event was enqueued since the script ran (the inbox is back): a drain
    # pops that entry for it. One enqueued between this read and the LREM loses its entry, and the reconcile sweep
    # publishes its scope again (worker/runtime/reconcile.py).
    if not client.exists(k.inbox(scope)):
        client.lrem(k.ready(tenant.tenant), 0, ref)
    for start in range(0, len(doomed), CHUNK):
        client.delete(*doomed[start : start + CHUNK])
        holds.keep_alive()
    report.removed["scopeKeys"] += len(doomed)


def _drop_expired_chains(
    store: EventStore, tenant: Keys, events: dict[str, UserEvent], report: ErasureReport
) -> None:
    """The chains of the user's indexed events whose records have expired (a chain outlives its event's
    record): the index names the event and its bucket. The lanes of their actions go first (a lane outlives the
    chain; its scope is the one the chain's source names)."""
    every = tenant.every_bucket()
    expired = [e for e in events.values() if not e.scope]
    for start in range(0, len(expired), CHUNK):
        doomed = [every[e.bucket].chain(e.event_id) for e in expired[start : start + CHUNK]]
        pipe = store.client.pipeline(transaction=False)
        for key in doomed:
            pipe.execute_command("GET", key, NEVER_DECODE=[])  # type: ignore[no-untyped-call]
        raws = zip(expired[start : start + CHUNK], pipe.execute(), strict=True)
        found = [_chain_lanes(tenant, None, raw, e.event_id) for e, raw in raws]
        # a lane without a TTL, either key, is kept by another, unfinished event (a payload.idempotencyKey they
        # share: worker/store/lua/lib/kept_lanes.lua): its redrive would apply it again
        lanes = _unkept(store, [lane for sure, maybe in found for lane in (*sure, *maybe)])
        if lanes:
            report.removed["lanes"] += int(store.client.delete(*lanes))
        report.removed["chains"] += int(store.client.delete(*doomed))


def _drop_sessions(store: EventStore, tenant: Keys, scopes: list[str], report: ErasureReport) -> None:
    """The session data of sessions that name the user, in scopes others' events keep (the rest of such a
    scope stays)."""
    for scope in scopes:
        doomed = [
            tenant.context(scope),
            tenant.context_meta(scope),
            tenant.checkpoints(scope),
            tenant.usage(scope),
            tenant.dmail(scope),
            tenant.session(scope),
            tenant.functions_state(scope),
        ]
        report.removed["scopeKeys"] += int(store.client.delete(*doomed))


def _drop_user_keyed(
    store: EventStore,
    tenant: Keys,
    user_id: str,
    report: ErasureReport,
    session_scope: Callable[[str], str],
    holds: ErasureHolds,
) -> None:
    """The engine's user-keyed families: receipts, conversations, the stored-bytes count, the user's share of the
    retained events. Not the rate buckets of the user's tokens (``ratelimit:{<tenant>}:<issuer>:<userId>``): they
    hold no data beyond the id in their name and expire once idle, and an erasure must never reset a rate."""
    k, client = tenant, store.client
    # Receipts: every one the user has is in the user's own index; the per-agent/topic and per-run indexes
    # are the keys under it.
    ids = [text(x) for x in client.zrange(k.user_receipts(user_id), 0, -1)]
    for start in range(0, len(ids), 500):
        report.removed["receipts"] += int(
            client.delete(*[k.receipt(user_id, i) for i in ids[start : start + 500]])
        )
    for index in _scan(store, glob_escaped(k.user_receipts(user_id)) + ":*", holds):
        client.delete(index)
    client.delete(k.user_receipts(user_id))
    for key in _scan(store, glob_escaped(k.receipt(user_id, "")) + "*", holds):
        report.removed["receipts"] += int(client.delete(key))  # one its indexes no longer name
    owners = [text(m) for m in client.zrange(k.user_conversations(user_id), 0, -1)]
    for member in owners:
        user, agent, topic = [*member.split("\x1f"), "", "", ""][:3]
        report.removed["conversations"] += int(client.delete(k.conversation(user, agent, topic)))
        client.zrem(k.conversations, member)
    client.delete(k.user_conversations(user_id))
    # the storage quota's count: nothing of the user is left to count, and the tenant's no longer holds it; nor
    # does what the user's sessions (their index, read now) would give back: one may outlive this erasure
    scopes = [session_scope(text(s)) for s in client.smembers(k.user_sessions(user_id))]
    sessions = [ForgottenSession(k.context_meta(scope), k.dmail(scope)) for scope in scopes]
    store.scripts.run(ForgetUserBytes(k.user_bytes(user_id), k.tenant_bytes, sessions))
    for bucket in k.every_bucket():  # and their share of the retained events starts again (one slot each)
        client.delete(bucket.retained_user_events(user_id))
    # the session index's cleaning mark: a minute, only the id in its name, which goes too
    client.delete(k.user_sessions_cleaned(user_id))
