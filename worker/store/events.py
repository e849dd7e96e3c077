"""The event store: enqueue with dedupe, per-scope inboxes, fenced begin/commit, dead letters, reads.

All state lives in Redis under :class:`worker.keys.layout.Keys`; each state change is one Lua script from
:mod:`worker.store.scripts`. This module does no Celery work: callers publish drain tasks when
:meth:`EventStore.enqueue_many` says a scope needs one.
"""

from __future__ import annotations

import json
import re
import secrets
import uuid
from collections.abc import Sequence
from operator import attrgetter
from typing import Any, TypedDict, cast

from redis import Redis
from redis.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import MovedError, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from worker.core.clock import now_ms
from worker.core.errors import EventOfAnotherUser, GuardErased, OverLimit, TenantDeleted
from worker.core.replication import NotReplicated
from worker.core.tenancy import DEFAULT_TENANT
from worker.documents.chain_codec import encode_chain
from worker.documents.event_records import source_digest
from worker.keys.layout import BucketKeys, EngineKeys, Keys, bucket_of
from worker.settings import Settings, leases_at_enqueue
from worker.store.calls import (
    Admission,
    Commit,
    CommittedEvent,
    Enqueue,
    EnqueuePush,
    Guard,
    PopNext,
    Redrive,
    ReindexLate,
    ScriptCall,
    UserBytes,
    UserEvents,
)
from worker.store.deleted_tenants import DeletedTenants
from worker.store.journal import journal_followups, journaled
from worker.store.quotas import quota_args, stored_bytes_checks
from worker.store.reads import StoreReads
from worker.store.records import (
    Begun,
    CommitReply,
    EnqueueOutcome,
    EventCommit,
    Head,
    OnStored,
    PreparedEvent,
    RunReply,
    staged_error,
    to_str,
)
from worker.store.scripts import Scripts, SentCall
from worker.store.server.client import is_cluster

__all__ = [
    "Begun",
    "CommitReply",
    "EnqueueOutcome",
    "EventCommit",
    "EventStore",
    "Head",
    "PreparedEvent",
    "ReadyPush",
    "RunReply",
    "staged_error",
]


# How redis-py words an error of a pipeline's command: the script's own refusal (OVERLIMIT, USERCONFLICT,
# ERASED…) follows it; with WAIT_REPLICAS every admission and commit runs in one, and the refusals were read
# as store failures (a review: a quota's 429 and a user conflict's 422 answered 503).
PIPELINE_ERROR = re.compile(r"^Command # \d+ \(.*?\) of pipeline caused error: ", re.DOTALL)


class ReadyPush(TypedDict):
    """ENQUEUE_PUSH's fair-share fields (worker/runtime/fair.py ``FairQueue.admission_push``)."""

    ring: str
    ready: str
    tickets: str
    drain_queue: str
    tickets_max: int
    ticket_ttl_ms: int
    drain_message: str  # '' where the caller sends the messages (the reply's count)


def _str(value: Any) -> str:
    return to_str(value)


# A drain marker's value at most this is the TTL its writer set (ms: three years); above, a time in ms (before).
MARKER_TTL_MAX_MS = 10**11


def marker_ttl_ms(value: object, default_ms: int) -> int:
    """The full TTL a drain marker was set with: its value (every writer writes its schedule TTL), or
    ``default_ms`` for a value that is none (a marker of before held its writer's time)."""
    text = to_str(value) if isinstance(value, str | bytes) else ""
    ttl_ms = int(text) if text.isascii() and text.isdigit() else 0
    return ttl_ms if 0 < ttl_ms <= MARKER_TTL_MAX_MS else default_ms


class EventStore(StoreReads):
    """Redis-backed events, inboxes and dead letters of every tenant under one key prefix: one per process. The
    tenant is a value each call carries (its key builder, or its events' ``tenant``); ``keys`` is the layout
    (the engine-wide keys, and ``keys.for_tenant(t)``: a tenant's)."""

    def __init__(self, client: Redis, settings: Settings) -> None:
        self.client = client
        self.settings = settings
        self.keys = EngineKeys(settings.key_prefix, settings.scope_buckets)
        # the lease at enqueue's TTL (ENQUEUE_PUSH), 0 where it does not apply
        self._grant_ttl_ms = int(settings.lease_ttl_s * 1000) if leases_at_enqueue(settings) else 0
        self.scripts = Scripts.register(client)
        self._registered: set[str] = set()  # tenants this process has added to the tenants set
        self.deleted_tenants = DeletedTenants(client, self.keys)  # checked by each admission and each drain

    def tenant_keys(self, tenant: str) -> Keys:
        """``tenant``'s key builder (checked: a tenant name is a key part)."""
        return self.keys.for_tenant(tenant)

    @property
    def schedule_ttl_ms(self) -> int:
        # A scheduled-drain marker outlives any queued drain message, so a lost publish self-heals.
        return int(self.settings.visibility_timeout_s * 1000)

    def marker_age_ms(self, marker_pttl_ms: int, marker_value: object = None) -> int | None:
        """How long ago a scope's drain marker was set, from its PTTL and its value: every writer sets it ``PX``
        its own :attr:`schedule_ttl_ms` (a hand-off for a wait: that plus the wait) and writes that TTL as its
        value, so the age is the value less the PTTL, on Redis's clock alone, whatever the writer's visibility
        timeout (a door configured with a longer one than this worker's wrote markers that read as young for the
        difference, and a lost drain waited that long for its repair). Negative while a marked wait lasts. A value
        that is no TTL (a marker of before, which held the writer's time) is aged by this process's TTL. None when
        there is none (-2) or it has no expiry (-1): its age is unknown."""
        if marker_pttl_ms <= 0:
            return None
        return marker_ttl_ms(marker_value, self.schedule_ttl_ms) - marker_pttl_ms

    # ---- producers -------------------------------------------------------------------------------

    def enqueue_many(
        self,
        events: Sequence[PreparedEvent],
        *,
        enforce_limits: bool = False,
        on_stored: OnStored | None = None,
        retained: bool = True,
    ) -> list[EnqueueOutcome]:
        """Claim each event's dedupe record and append it to its scope inbox: the whole batch is one
        ENQUEUE_BATCH script, so a store error (out of memory: refused before any write) stores none of it.
        ``retained=False``: the events count toward no retained-events quota (follow-ups a chain emitted, which
        its commit admits uncounted in its own bucket: worker/store/quotas.py)."""
        return self._enqueue(events, enforce_limits, None, on_stored, retained)[0]

    def enqueue_and_push(
        self,
        events: Sequence[PreparedEvent],
        push: ReadyPush,
        *,
        enforce_limits: bool,
        on_stored: OnStored | None = None,
    ) -> tuple[list[EnqueueOutcome], int]:
        """:meth:`enqueue_many` and, in the same script (ENQUEUE_PUSH), the scopes it made ready pushed as
        ``push`` (FairQueue.admission_push) says: the outcomes and the drain tickets taken whose messages the
        caller sends (none where the script pushed them on the broker's list itself: ``push['drain_message']``)."""
        return self._enqueue(events, enforce_limits, push, on_stored)

    def _enqueue(
        self,
        events: Sequence[PreparedEvent],
        enforce_limits: bool,
        push: ReadyPush | None,
        on_stored: OnStored | None = None,
        retained: bool = True,
    ) -> tuple[list[EnqueueOutcome], int]:
        if not events:
            return [], 0
        tenant = events[0].tenant
        if any(ev.tenant != tenant for ev in events):
            raise ValueError("one enqueue holds one tenant's events")
        if self.deleted_tenants.deleted(
            tenant
        ):  # a plugin's admission, a producer of its own (the door refused)
            raise TenantDeleted(tenant)
        k = self.tenant_keys(tenant)
        self.register_tenant(tenant)
        if k.buckets <= 1:
            return self._enqueue_bucket(
                k.for_bucket(0), events, enforce_limits, push, enforce_limits, retained
            )
        # Scope buckets: one script per bucket (each is whole or nothing; the batch no longer is), the tenant's
        # queue quota checked against the buckets' sum first (concurrent batches may pass it together).
        groups: dict[int, list[int]] = {}
        for i, ev in enumerate(events):
            groups.setdefault(bucket_of(ev.scope_key, k.buckets), []).append(i)
        refusal = self.limits_refusal(k, events) if enforce_limits else None
        if refusal is not None:
            raise self._over_limit(refusal, self.users_of(events))
        if enforce_limits and (conflict := self._user_conflict(k, events)) is not None:
            raise conflict  # before any bucket's script: a later bucket's refusal would follow earlier stores
        outcomes: list[EnqueueOutcome | None] = [None] * len(events)
        tickets = 0
        try:
            for bucket, positions in groups.items():
                done, taken = self._enqueue_bucket(
                    k.for_bucket(bucket),
                    [events[i] for i in positions],
                    enforce_limits,
                    push,
                    False,
                    retained,
                )
                tickets += taken
                for i, outcome in zip(positions, done, strict=True):
                    outcomes[i] = outcome
        except Exception:
            if on_stored is not None:  # what the buckets before the failure stored still needs its drains
                on_stored([o for o in outcomes if o is not None], tickets)
            raise
        return [o for o in outcomes if o is not None], tickets

    def _user_conflict(self, k: Keys, events: Sequence[PreparedEvent]) -> EventOfAnotherUser | None:
        """With scope buckets, the enqueue script's user check read first over every bucket (one pipeline): an
        event whose dedupe key holds (or an earlier event of the batch gives) an event of another owner, another
        user or none (an erased event's tombstone names nobody: a replay is its duplicate). The scripts check
        again (a batch racing this one)."""
        pipe = self.client.pipeline(transaction=False)
        for ev in events:
            pipe.hmget(k.for_scope(ev.scope_key).event(ev.event_id), "state", "userId", "erasedAt")
        owners: dict[str, str] = {}
        for ev, (state, stored, erased) in zip(events, pipe.execute(), strict=True):
            user = ev.user_id or ""
            owner = owners.setdefault(
                ev.event_id, (stored or "") if state is not None and not erased else user
            )
            if owner != user:
                return EventOfAnotherUser(ev.event_id, user)
        return None

    def _enqueue_bucket(
        self,
        k: BucketKeys,
        events: Sequence[PreparedEvent],
        enforce_limits: bool,
        push: ReadyPush | None,
        tenant_quota: bool,
        retained: bool,
    ) -> tuple[list[EnqueueOutcome], int]:
        users = self.users_of(events) if tenant_quota else []
        # read by the script: the home slot is the bucket's only with one bucket (else the door read them)
        checks = stored_bytes_checks(self.settings, k, users) if tenant_quota else []
        max_events, max_user_events, slot_ms, unit_bytes = quota_args(self.settings, tenant_quota)
        slot_ms = slot_ms if retained else 0  # 0: nothing counted
        # each user's share of the retained events: counted in every bucket's script, checked in one bucket's
        counted = self.users_of(events) if slot_ms and self.settings.user_max_events else []
        guards = _guards(k, events)
        fields: dict[str, Any] = dict(
            scopes=k.scopes,
            stats=k.stats,
            paused=k.runs("paused"),
            runs_active=k.runs("status", "active"),
            runs_types=k.runs("types"),
            retained=k.retained_events,
            dlq=k.dlq,
            now_ms=now_ms(),
            window_s=self.settings.dedupe_window_s,
            sched_ttl_ms=self.schedule_ttl_ms,
            tenant=k.tenant,
            max_inbox=self.settings.max_inbox_depth if enforce_limits else 0,
            max_queued=self.settings.tenant_max_queued if tenant_quota else 0,
            run_index_max=self.settings.run_index_max,
            max_events=max_events,
            retained_slot_ms=slot_ms,
            user_count=len(checks),
            retained_unit_bytes=unit_bytes,
            max_user_events=max_user_events,
            user_events_count=len(counted),
            guard_count=len(guards),
            events=[self._admission(k, ev) for ev in events],
            user_events=[UserEvents(k.retained_user_events(user), user) for user in counted],
            users=[UserBytes(key, max_bytes) for key, max_bytes in checks],
            guards=guards,
        )
        call: ScriptCall = (
            Enqueue(**fields)
            if push is None
            else EnqueuePush(
                **fields,
                **push,
                drain_id=uuid.uuid4().hex,
                ready_prefix=self.keys.ready_prefix,
                key_prefix=self.keys.prefix,
                grant_token=secrets.token_hex(16) if self._grant_ttl_ms else "",
                grant_ttl_ms=self._grant_ttl_ms,
            )
        )
        try:
            replies = self.durable(call)
        except ResponseError as exc:
            if str(exc).startswith("OVERLIMIT"):
                raise self._over_limit(str(exc), users) from None
            if str(exc).startswith("USERCONFLICT "):
                _, event_id, *user = str(exc).split(" ", 2)  # no user: nothing after the id
                raise EventOfAnotherUser(event_id, user[0] if user else "") from None
            if str(exc).startswith("ERASED "):
                raise GuardErased(events[int(str(exc).split(" ", 2)[1]) - 1].event_id) from None
            raise
        outcomes = [
            EnqueueOutcome(
                ev.event_id, ev.source_id, ev.scope_key, "accepted" if ok else "duplicate", bool(publish)
            )
            for ev, (ok, publish) in zip(events, replies[: len(events)], strict=True)
        ]
        return outcomes, int(replies[len(events)]) if push is not None else 0

    def _over_limit(self, reply: str, users: Sequence[str] = ()) -> OverLimit:
        return OverLimit.from_reply(reply, self.settings, users)

    def _admission(self, k: Keys, ev: PreparedEvent) -> Admission:
        """One event's admission (ENQUEUE, and COMMIT for follow-ups) with ``k``'s tenant: its record, inbox, drain
        marker, counter, user index, scope users, source type and scope indexes and source-id bucket; its id,
        scope ref, body, user, source type and id, and its member in the bucket."""
        b, digest = k.for_scope(ev.scope_key), source_digest(ev.source_id)
        return Admission(
            ev=b.event(ev.event_id),
            inbox=b.inbox(ev.scope_key),
            sched=b.scheduled(ev.scope_key),
            seq=b.enqueue_seq(ev.scope_key),
            user_index=b.user_events(ev.user_id or ""),
            scope_users=b.scope_users(ev.scope_key),
            runs_type=b.runs("type", ev.source_type),
            runs_scope=b.runs_of_scope(ev.scope_key),
            by_source=b.events_of_source(digest),
            event_id=ev.event_id,
            scope_ref=b.scope_ref(ev.scope_key),
            body=ev.body,
            user_id=ev.user_id or "",
            source_type=ev.source_type,
            source_id=ev.source_id,
            source_member=f"{digest}:{ev.event_id}",
        )

    def count_rejected(self, k: Keys, n: int = 1) -> None:
        """``k``'s tenant's invalid events; best effort: a full store must not turn a 422 for bad input into a 503."""
        try:
            self.client.hincrby(k.tenant_stats, "rejected", n)
        except RedisError:
            return

    # ---- worker ----------------------------------------------------------------------------------

    def durable(self, call: ScriptCall) -> Any:
        """Run ``call``'s script; with ``wait_replicas`` set, ``WAIT`` on the same connection (one pipeline) for
        that many replicas, and raise :class:`NotReplicated` when fewer confirmed: the write is not acknowledged."""
        wanted = self.settings.wait_replicas
        if not wanted:
            return self.scripts.run(call)
        timeout_ms = self.settings.wait_replicas_timeout_ms
        target = self.client
        cluster = cast(RedisCluster, self.client) if is_cluster(self.client) else None
        if cluster is not None:  # WAIT counts one connection's writes: the node of the tenant's slot
            target = cluster.get_node_from_key(call.keys()[0]).redis_connection  # type: ignore[no-untyped-call]
        pipe = target.pipeline(transaction=False)
        self.scripts.run(call, client=pipe)
        pipe.execute_command("WAIT", wanted, timeout_ms)  # type: ignore[no-untyped-call]
        try:
            reply, acked = pipe.execute()
        except (RedisConnectionError, RedisTimeoutError, ResponseError) as exc:
            # Past the cluster client's own redirects: a failover (or MOVED) means the slot map is stale.
            # (a MovedError inside a pipeline reads "Command # n (...) of pipeline caused error: <slot> <node>")
            stale = (
                not isinstance(exc, ResponseError)
                or isinstance(exc, MovedError)
                or str(exc).startswith("MOVED")
            )
            if cluster is not None and stale:
                cluster.nodes_manager.initialize()
            words = PIPELINE_ERROR.sub("", str(exc), count=1)
            if not stale and words != str(exc):  # the script's own refusal, worded as it is without WAIT
                raise type(exc)(words) from exc
            raise
        if int(acked) < wanted:
            raise NotReplicated(wanted, int(acked), timeout_ms, reply)
        return reply

    def commit_run(self, call: Commit) -> RunReply:
        """COMMIT: a run of one or more head events of a scope (:meth:`commit_call`), and its reply."""
        return RunReply.parse(self.durable(call))

    @property
    def sends_ahead(self) -> bool:
        """Whether :meth:`send_commit` sends a COMMIT without waiting for its reply: on one Redis (not a cluster),
        without ``wait_replicas`` (whose WAIT must follow the script on the same connection), and with a pool of
        two connections or more (the one in flight is the commit's until its reply is read)."""
        settings = self.settings
        return self.scripts.plain and not settings.wait_replicas and settings.redis_max_connections >= 2

    def send_commit(self, call: Commit) -> SentCall:
        """:meth:`commit_run`, sent now (where :attr:`sends_ahead`); :meth:`SentCall.reply` reads it (parse it
        with ``RunReply.parse``)."""
        if not self.sends_ahead:
            raise TypeError("this store does not send ahead (a cluster, wait_replicas, or a pool of one)")
        return self.scripts.send(call)

    def commit_call(
        self,
        k: Keys,
        scope_key: str,
        *,
        fence: int,
        token: str,
        events: Sequence[EventCommit],
        go_on: Sequence[bool],
        peek: int = 0,
        peek_skip: int = 0,
        then_pop: PopNext | None = None,
    ) -> Commit:
        """COMMIT's call: a run of one or more head events of ``k``'s tenant's scope, in inbox order, fenced; each
        event's ``go_on`` takes the next head in the same round trip (or releases the scope when it is idle);
        ``peek``: how many fresh events behind the new head to list for the next run, after the first
        ``peek_skip`` (the caller knows those); ``then_pop``: once the scope is released, pop the next ready
        scope and take its lease (:attr:`RunReply.popped`; one Redis, one scope bucket only)."""
        b, settings = k.for_scope(scope_key), self.settings
        return Commit(
            inbox=b.inbox(scope_key),
            fence_key=b.fence(scope_key),
            dlq=b.dlq,
            stats=b.stats,
            lease=b.lease(scope_key),
            sched=b.scheduled(scope_key),
            scopes=b.scopes,
            series=b.series,
            paused=b.runs("paused"),
            runs_active=b.runs("status", "active"),
            runs_types=b.runs("types"),
            runs_dead=b.runs("status", "dead"),
            runs_cancelled=b.runs("status", "cancelled"),
            lane_holders=b.lane_holders,
            fence=fence,
            now_ms=now_ms(),
            window_s=settings.dedupe_window_s,
            sched_ttl_ms=self.schedule_ttl_ms,
            run_index_max=settings.run_index_max,
            chain_ttl_s=settings.chain_retention_s,
            token=token,
            scope_ref=b.scope_ref(scope_key),
            ev_prefix=b.event_prefix,
            lane_ttl_s=settings.idempotency_ttl_s,
            peek_count=peek,
            peek_skip=peek_skip,
            pop_next=0 if then_pop is None else 1,
            lease_ttl_ms=round(settings.lease_ttl_s * 1000),
            pop=() if then_pop is None else (then_pop,),
            events=[self._committed(b, scope_key, fence, e, g) for e, g in zip(events, go_on, strict=True)],
        )

    def _committed(
        self, b: BucketKeys, scope: str, fence: int, e: EventCommit, go_on: bool
    ) -> CommittedEvent:
        """One event of a COMMIT: its record and chain, outcome, staged writes and follow-ups (with scope
        buckets, what belongs to another slot journaled: worker/store/journal.py), and its lanes."""
        retention_s = self.settings.outbox_retention_s
        own_followups = e.followups
        effects = e.effects.to_json_list() if e.effects else []
        if b.buckets > 1:
            label = f"{e.event_id}:{fence}"
            own_followups, journal = journal_followups(b, scope, e.event_id, label, e.followups, retention_s)
            effects = journaled(b, scope, e.event_id, f"{label}:commit", effects, retention_s) + journal
        followups = [[*a.keys(), *a.args()] for a in (self._admission(b, ev) for ev in own_followups)]
        return CommittedEvent(
            ev=b.event(e.event_id),
            chain=b.chain(e.event_id),  # one run's trace: never another's
            lane_count=len(e.lanes),
            event_id=e.event_id,
            outcome=e.outcome,
            error_text=e.error,
            not_before=e.not_before_ms,
            chain_json=encode_chain(e.chain_json, self.settings.stored_form) if e.chain_json else "",
            chain_id="" if e.chain_id == f"chain:{e.source_id}" else e.chain_id,
            go_on="1" if go_on else "0",
            effects_json=json.dumps(effects) if effects else "[]",
            followups_json=json.dumps(followups, ensure_ascii=False) if followups else "[]",
            kept_lanes_json=json.dumps(list(e.kept_lanes)) if e.kept_lanes else "",
            lanes=e.lanes,
        )

    # ---- reads (and worker/store/reads.py) ------------------------------------------------------

    def register_tenant(self, tenant: str) -> None:
        """Add ``tenant`` to the engine-wide tenants set, once per process, before its first admission (the
        set is in no tenant's slot, so the admission script cannot write it)."""
        if tenant not in self._registered:
            self.client.sadd(self.keys.tenants, tenant)
            self._registered.add(tenant)

    def known_tenants(self) -> list[str]:
        """Every tenant that has enqueued an event and has not been deleted since (metrics label each tenant's
        counters). A deleted tenant's name stays in the set (a name used again must be found), but a walk found it
        reported at zero on ``/metrics/state`` and ``/v1/backlog`` for good, one series set per tenant ever
        offboarded; a key made for the name again brings it back."""
        names = (_str(x) for x in self.client.smembers(self.keys.tenants))
        return sorted(t for t in names if not self.deleted_tenants.deleted(t))

    def active_scope_refs(self) -> list[str]:
        """Every tenant's scopes with queued work, as scope refs ``<tenant>/<scopeKey>`` (each tenant's own
        registry, read in one pipeline)."""
        tenants = sorted({*self.known_tenants(), DEFAULT_TENANT})
        return sorted(ref for t in tenants for ref in self.scope_refs_of(self.keys.for_tenant(t)))

    # ---- dead letters (listed by worker/store/reads.py) -------------------------------------------

    def redrive(self, tenant_keys: Keys, event_id: str, *, body: str = "") -> tuple[bool, str | None, bool]:
        """Requeue one of the tenant's dead events (with ``body`` replacing the stored event, when given); returns
        (requeued, scopeKey, needs a drain task)."""
        k = self.locate(tenant_keys, event_id, in_dlq=True)
        found = self.client.hget(k.event(event_id), "scopeKey")
        if found is None:
            # no record: a DLQ entry naming it is stale, and an "all" sweep would meet it for ever
            pipe = self.client.pipeline(transaction=False)
            pipe.zrem(k.dlq, event_id)
            pipe.zrem(k.runs("status", "dead"), event_id)  # the dead index is never trimmed
            pipe.execute()
            return False, None, False
        scope_key = _str(found)
        ok, publish = self.scripts.run(
            Redrive(
                ev=k.event(event_id),
                inbox=k.inbox(scope_key),
                sched=k.scheduled(scope_key),
                scopes=k.scopes,
                dlq=k.dlq,
                stats=k.stats,
                seq=k.enqueue_seq(scope_key),
                paused=k.runs("paused"),
                runs_dead=k.runs("status", "dead"),
                runs_active=k.runs("status", "active"),
                event_id=event_id,
                scope_ref=k.scope_ref(scope_key),
                now_ms=now_ms(),
                sched_ttl_ms=self.schedule_ttl_ms,
                window_s=self.settings.dedupe_window_s,
                new_body=body,
                scope_key=scope_key,
                run_index_max=self.settings.run_index_max,
            )
        )
        return bool(ok), scope_key, bool(publish)

    def reindex_late(
        self, k: BucketKeys, event_id: str, *, scope_key: str, source_type: str, source_id: str, user_id: str
    ) -> bool:
        """Index again at its end an event that ended (done or dead) more than the window after it was enqueued
        (REINDEX_LATE); False when it ended within the window, or did not end."""
        digest = source_digest(source_id)
        call = ReindexLate(
            ev=k.event(event_id),
            runs_type=k.runs("type", source_type),
            runs_types=k.runs("types"),
            runs_scope=k.runs_of_scope(scope_key),
            by_source=k.events_of_source(digest),
            user_index=k.user_events(user_id),
            event_id=event_id,
            source_type=source_type,
            source_member=f"{digest}:{event_id}",
            now_ms=now_ms(),
            window_s=self.settings.dedupe_window_s,
            user_id=user_id,
        )
        return bool(self.scripts.run(call))


def _guards(k: BucketKeys, events: Sequence[PreparedEvent]) -> list[Guard]:
    """The batch's guards: each event admitted only while another is no tombstone (``unless_erased``), by its place
    in the batch. The common batch has none, found in one C-level pass."""
    if not any(map(attrgetter("unless_erased"), events)):
        return []
    return [
        Guard(k.for_scope(ev.scope_key).event(ev.unless_erased), position)
        for position, ev in enumerate(events, 1)
        if ev.unless_erased
    ]
