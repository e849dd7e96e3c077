"""The event store: enqueue with dedupe, per-scope inboxes, fenced begin/commit, dead letters, reads.

All state lives in Redis under :class:`worker.keys.layout.Keys`; each state change is one Lua script from
:mod:`worker.store.scripts`. This module does no Celery work: callers publish drain tasks when
:meth:`EventStore.enqueue_many` says a scope needs one.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any, cast

from redis import Redis
from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import MovedError, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from worker.core.clock import now_ms
from worker.core.errors import NotReplicated, OverLimit
from worker.documents.chain_codec import encode_chain
from worker.documents.event_records import source_digest
from worker.keys.layout import Keys, bucket_of
from worker.settings import Settings
from worker.store.client import is_cluster
from worker.store.journal import journal_followups, journaled
from worker.store.quotas import quota_args
from worker.store.reads import StoreReads
from worker.store.records import (
    Begun,
    Commit,
    CommitReply,
    EnqueueOutcome,
    Head,
    OnStored,
    PreparedEvent,
    staged_error,
    to_str,
)
from worker.store.scripts import Scripts
from worker.store.scripts_batch import EVENT_ARGS, EVENT_KEYS

__all__ = [
    "Begun",
    "Commit",
    "CommitReply",
    "EnqueueOutcome",
    "EventStore",
    "Head",
    "PreparedEvent",
    "staged_error",
]


def _str(value: Any) -> str:
    return to_str(value)


class EventStore(StoreReads):
    """Redis-backed events, inboxes and dead letters for one key prefix and one tenant (``for_tenant``
    gives the same store for another: same client and scripts, keys bound to that tenant)."""

    def __init__(self, client: Redis, settings: Settings, *, tenant: str = "default") -> None:
        self.client = client
        self.settings = settings
        self.keys = Keys(settings.key_prefix, tenant, settings.scope_buckets)
        self.scripts = Scripts.register(client).for_tenant(self.keys)
        self._registered: set[str] = set()  # tenants this process has added to the tenants set (all views)

    @property
    def tenant(self) -> str:
        return self.keys.tenant

    def for_tenant(self, tenant: str) -> EventStore:
        if tenant == self.keys.tenant:
            return self
        other = copy.copy(self)
        other.keys = self.keys.for_tenant(tenant)
        other.scripts = self.scripts.for_tenant(other.keys)
        return other

    @property
    def schedule_ttl_ms(self) -> int:
        # A scheduled-drain marker outlives any queued drain message, so a lost publish self-heals.
        return int(self.settings.visibility_timeout_s * 1000)

    # ---- producers -------------------------------------------------------------------------------

    def enqueue_many(
        self,
        events: Sequence[PreparedEvent],
        *,
        enforce_limits: bool = False,
        on_stored: OnStored | None = None,
    ) -> list[EnqueueOutcome]:
        """Claim each event's dedupe record and append it to its scope inbox: the whole batch is one
        ENQUEUE_BATCH script, so a store error (out of memory: refused before any write) stores none of it."""
        return self._enqueue(events, enforce_limits, None, on_stored)[0]

    def enqueue_and_push(
        self,
        events: Sequence[PreparedEvent],
        push: tuple[list[str], list[Any]],
        *,
        enforce_limits: bool,
        on_stored: OnStored | None = None,
    ) -> tuple[list[EnqueueOutcome], int]:
        """:meth:`enqueue_many` and, in the same script (ENQUEUE_PUSH), the scopes it made ready pushed as
        ``push`` (FairQueue.admission_push) says: the outcomes and the drain tickets taken (messages to send)."""
        return self._enqueue(events, enforce_limits, push, on_stored)

    def _enqueue(
        self,
        events: Sequence[PreparedEvent],
        enforce_limits: bool,
        push: tuple[list[str], list[Any]] | None,
        on_stored: OnStored | None = None,
    ) -> tuple[list[EnqueueOutcome], int]:
        if not events:
            return [], 0
        self.register_tenant()
        if self.keys.buckets <= 1:
            return self._enqueue_bucket(self.keys, events, enforce_limits, push, enforce_limits)
        # Scope buckets: one script per bucket (each is whole or nothing; the batch no longer is), the tenant's
        # queue quota checked against the buckets' sum first (concurrent batches may pass it together).
        groups: dict[int, list[int]] = {}
        for i, ev in enumerate(events):
            groups.setdefault(bucket_of(ev.scope_key, self.keys.buckets), []).append(i)
        refusal = self.limits_refusal(events) if enforce_limits else None
        if refusal is not None:
            raise self._over_limit(refusal, self.users_of(events))
        outcomes: list[EnqueueOutcome | None] = [None] * len(events)
        tickets = 0
        try:
            for bucket, positions in groups.items():
                done, taken = self._enqueue_bucket(
                    self.keys.for_bucket(bucket), [events[i] for i in positions], enforce_limits, push, False
                )
                tickets += taken
                for i, outcome in zip(positions, done, strict=True):
                    outcomes[i] = outcome
        except Exception:
            if on_stored is not None:  # what the buckets before the failure stored still needs its drains
                on_stored([o for o in outcomes if o is not None], tickets)
            raise
        return [o for o in outcomes if o is not None], tickets

    def _enqueue_bucket(
        self,
        k: Keys,
        events: Sequence[PreparedEvent],
        enforce_limits: bool,
        push: tuple[list[str], list[Any]] | None,
        tenant_quota: bool,
    ) -> tuple[list[EnqueueOutcome], int]:
        keys = [k.scopes, k.stats, k.runs("paused"), k.runs("all"), k.runs("status", "active")]
        keys.append(k.retained_events)
        users = self.users_of(events) if tenant_quota else []  # read by the script: one slot with one bucket
        args: list[Any] = [
            now_ms(),
            self.settings.dedupe_window_s,
            self.schedule_ttl_ms,
            k.tenant,
            self.settings.max_inbox_depth if enforce_limits else 0,
            self.settings.tenant_max_queued if tenant_quota else 0,
            self.settings.run_index_max,
            *quota_args(self.settings, tenant_quota, users),
        ]
        if push is not None:  # ENQUEUE_PUSH's header: the ready lists' keys, the tickets' cap and TTL
            keys, args = keys + push[0], args + push[1]
        for ev in events:
            ev_keys, ev_args = self._admission(ev)
            keys += ev_keys
            args += ev_args
        keys += [self.keys.user_bytes(user) for user in users]
        script = self.scripts.enqueue_batch if push is None else self.scripts.enqueue_push
        try:
            replies = self.durable(script, keys, args)
        except ResponseError as exc:
            if str(exc).startswith("OVERLIMIT"):
                raise self._over_limit(str(exc), users) from None
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

    def _admission(self, ev: PreparedEvent) -> tuple[list[str], list[str]]:
        """One event's keys and arguments as ENQUEUE_BATCH and COMMIT (follow-ups) admit it: its record, inbox,
        drain marker, counter, user index, scope users, source type and scope indexes and source-id bucket;
        its id, scope ref, body, user, source type and id, and its member in the bucket."""
        k, digest = self.keys.for_scope(ev.scope_key), source_digest(ev.source_id)
        keys = [
            k.event(ev.event_id),
            k.inbox(ev.scope_key),
            k.scheduled(ev.scope_key),
            k.enqueue_seq(ev.scope_key),
            k.user_events(ev.user_id or ""),
            k.scope_users(ev.scope_key),
            k.runs("type", ev.source_type),
            k.runs_of_scope(ev.scope_key),
            k.events_of_source(digest),
        ]
        user = ev.user_id or ""
        args = [ev.event_id, k.scope_ref(ev.scope_key), ev.body, user, ev.source_type, ev.source_id]
        return keys, [*args, f"{digest}:{ev.event_id}"]

    def count_rejected(self, n: int = 1) -> None:
        """Best effort: a full store must not turn a 422 for bad input into a 503."""
        try:
            self.client.hincrby(self.keys.tenant_stats, "rejected", n)
        except RedisError:
            return

    # ---- worker ----------------------------------------------------------------------------------

    def durable(self, script: Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run ``script``; with ``wait_replicas`` set, ``WAIT`` on the same connection (one pipeline) for that
        many replicas, and raise :class:`NotReplicated` when fewer confirmed: the write is not acknowledged."""
        wanted = self.settings.wait_replicas
        if not wanted:
            return script(keys=list(keys), args=list(args))
        timeout_ms = self.settings.wait_replicas_timeout_ms
        target = self.client
        cluster = cast(RedisCluster, self.client) if is_cluster(self.client) else None
        if cluster is not None:  # WAIT counts one connection's writes: the node of the tenant's slot
            target = cluster.get_node_from_key(keys[0]).redis_connection  # type: ignore[no-untyped-call]
        pipe = target.pipeline(transaction=False)
        script(keys=list(keys), args=list(args), client=pipe)
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
            raise
        if int(acked) < wanted:
            raise NotReplicated(wanted, int(acked), timeout_ms)
        return reply

    def commit(self, commit: Commit, *, go_on: bool = False) -> CommitReply:
        """Fenced commit of the head event (see :class:`Commit`); with ``go_on`` the same round trip takes
        the next head, or releases the scope when it is idle."""
        keys, args = self.commit_call(commit, go_on=go_on)
        return self.commit_reply(self.durable(self.scripts.commit, keys, args))

    def commit_call(self, commit: Commit, *, go_on: bool) -> tuple[list[str], list[Any]]:
        """COMMIT's keys and arguments for ``commit``: :meth:`commit_shared` with :meth:`commit_own` in their
        places (:data:`~worker.store.scripts_batch.EVENT_KEYS` and :data:`~worker.store.scripts_batch.EVENT_ARGS`)."""
        keys, args = self.commit_shared(commit, now_ms())
        own_keys, own_args = self.commit_own(commit, go_on=go_on)
        for pos, key in zip(EVENT_KEYS, own_keys, strict=True):
            keys[pos - 1] = key
        for pos, arg in zip(EVENT_ARGS, own_args, strict=True):
            args[pos - 1] = arg
        return keys, args

    def commit_shared(self, commit: Commit, at_ms: int) -> tuple[list[str], list[Any]]:
        """COMMIT's keys and arguments that every event of ``commit``'s scope shares (its inbox, lease, fence,
        the tenant's indexes, the time), with ``""`` where :meth:`commit_own` goes: COMMIT_BATCH sends them once
        per batch."""
        k, scope, own = (
            self.keys.for_scope(commit.scope_key),
            commit.scope_key,
            "",
        )  # own: commit_own's places
        statuses = (k.runs("status", s) for s in ("active", "done", "dead", "cancelled"))
        keys = [k.inbox(scope), k.fence(scope), own, k.dlq, k.stats, own, k.lease(scope), k.scheduled(scope)]
        keys += [k.scopes, k.series, k.runs("paused"), k.runs("all"), *statuses]
        settings = self.settings
        args: list[Any] = [commit.fence, own, own, at_ms, settings.dedupe_window_s, own, own, own]
        args += [
            settings.chain_retention_s,
            own,
            commit.token,
            k.scope_ref(scope),
            k.event_prefix,
            own,
            own,
            own,
        ]
        args += [self.schedule_ttl_ms, settings.run_index_max]
        return keys, args

    def commit_own(self, commit: Commit, *, go_on: bool) -> tuple[list[str], list[Any]]:
        """COMMIT's keys and arguments that are ``commit``'s own (its event, chain, outcome, staged writes and
        follow-ups), in the order of :data:`~worker.store.scripts_batch.EVENT_KEYS` and ``EVENT_ARGS``."""
        k, scope = self.keys.for_scope(commit.scope_key), commit.scope_key
        retention_s = self.settings.outbox_retention_s
        own_followups = commit.followups
        effects = commit.effects.to_json_list() if commit.effects else []
        if k.buckets > 1:  # what belongs to another slot is journaled (worker/store/journal.py)
            label = f"{commit.event_id}:{commit.fence}"
            own_followups, journal = journal_followups(
                k, scope, commit.event_id, label, commit.followups, retention_s
            )
            effects = journaled(k, scope, commit.event_id, f"{label}:commit", effects, retention_s) + journal
        followups = [[*keys, *args] for keys, args in map(self._admission, own_followups)]
        return (
            [k.event(commit.event_id), k.chain(commit.event_id)],  # one run's trace: never another's
            [
                commit.event_id,
                commit.outcome,
                commit.error,
                commit.not_before_ms,
                encode_chain(commit.chain_json) if commit.chain_json else "",
                "" if commit.chain_id == f"chain:{commit.source_id}" else commit.chain_id,
                "1" if go_on else "0",
                json.dumps(effects) if effects else "[]",
                json.dumps(followups, ensure_ascii=False) if followups else "[]",
            ],
        )

    @staticmethod
    def commit_reply(reply: Sequence[Any]) -> CommitReply:
        """COMMIT's reply as a :class:`CommitReply`."""
        code = int(reply[0])
        if code == -3:
            return CommitReply(code, error=staged_error(reply))
        if code != 1:
            return CommitReply(code)
        publish = [_str(x) for x in reply[1]] if isinstance(reply[1], list) else []
        head = Head.parse(reply[4:]) if len(reply) > 4 else None
        latency_ms = int(reply[3])
        return CommitReply(
            code, publish, head, _str(reply[2]), latency_ms=None if latency_ms < 0 else latency_ms
        )

    # ---- reads (and worker/store/reads.py) ------------------------------------------------------

    def register_tenant(self) -> None:
        """Add this tenant to the engine-wide tenants set, once per process, before its first admission (the
        set is in no tenant's slot, so the admission script cannot write it)."""
        if self.keys.tenant not in self._registered:
            self.client.sadd(self.keys.tenants, self.keys.tenant)
            self._registered.add(self.keys.tenant)

    def known_tenants(self) -> list[str]:
        """Every tenant that has enqueued an event (metrics label each tenant's counters)."""
        return sorted(_str(x) for x in self.client.smembers(self.keys.tenants))

    def active_scope_refs(self) -> list[str]:
        """Every tenant's scopes with queued work, as scope refs ``<tenant>/<scopeKey>`` (each tenant's own
        registry, read in one pipeline)."""
        tenants = sorted({*self.known_tenants(), self.keys.tenant})
        return sorted(ref for t in tenants for ref in self.scope_refs_of(self.keys.for_tenant(t)))

    # ---- dead letters (listed by worker/store/reads.py) -------------------------------------------

    def redrive(self, event_id: str, *, body: str = "") -> tuple[bool, str | None, bool]:
        """Requeue one dead event (with ``body`` replacing the stored event, when given); returns (requeued,
        scopeKey, needs a drain task)."""
        k = self.locate(event_id)
        found = self.client.hget(k.event(event_id), "scopeKey")
        if found is None:
            return False, None, False
        scope_key = _str(found)
        ok, publish = self.scripts.redrive(
            keys=[
                k.event(event_id),
                k.inbox(scope_key),
                k.scheduled(scope_key),
                k.scopes,
                k.dlq,
                k.stats,
                k.enqueue_seq(scope_key),
                k.runs("paused"),
                k.runs("status", "dead"),
                k.runs("status", "active"),
            ],
            args=[
                event_id,
                self.keys.scope_ref(scope_key),
                now_ms(),
                self.schedule_ttl_ms,
                self.settings.dedupe_window_s,
                body,
                scope_key,
                self.settings.run_index_max,
            ],
        )
        return bool(ok), scope_key, bool(publish)
