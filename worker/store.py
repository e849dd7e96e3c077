"""The event store: enqueue with dedupe, per-scope inboxes, fenced begin/commit, dead letters, reads.

All state lives in Redis under :class:`worker.keys.Keys`; each state change is one Lua script from
:mod:`worker.scripts`. This module does no Celery work: callers publish drain tasks when
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
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from worker.chain_codec import decode_chain, encode_chain
from worker.chain_storage import rebuilt_chain, stored_event_id
from worker.errors import NotReplicated, OverLimit
from worker.event_body import body_of
from worker.event_records import source_digest, status_record
from worker.keys import Keys
from worker.redis_client import is_cluster
from worker.scripts import Scripts
from worker.scripts_batch import EVENT_ARGS, EVENT_KEYS
from worker.settings import Settings
from worker.store_records import (
    Begun,
    Commit,
    CommitReply,
    EnqueueOutcome,
    Head,
    PreparedEvent,
    now_ms,
    staged_error,
    to_str,
)

__all__ = [
    "Begun",
    "Commit",
    "CommitReply",
    "EnqueueOutcome",
    "EventStore",
    "Head",
    "PreparedEvent",
    "now_ms",
    "staged_error",
]


def _str(value: Any) -> str:
    return to_str(value)


def _str_dict(raw: Any) -> dict[str, str]:
    return {_str(k): _str(v) for k, v in raw.items()}


class EventStore:
    """Redis-backed events, inboxes and dead letters for one key prefix and one tenant (``for_tenant``
    gives the same store for another: same client and scripts, keys bound to that tenant)."""

    def __init__(self, client: Redis, settings: Settings, *, tenant: str = "default") -> None:
        self.client = client
        self.settings = settings
        self.keys = Keys(settings.key_prefix, tenant)
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
        self, events: Sequence[PreparedEvent], *, enforce_limits: bool = False
    ) -> list[EnqueueOutcome]:
        """Claim each event's dedupe record and append it to its scope inbox: the whole batch is one
        ENQUEUE_BATCH script, so a store error (out of memory: refused before any write) stores none of it."""
        return self._enqueue(events, enforce_limits, None)[0]

    def enqueue_and_push(
        self, events: Sequence[PreparedEvent], push: tuple[list[str], list[Any]], *, enforce_limits: bool
    ) -> tuple[list[EnqueueOutcome], int]:
        """:meth:`enqueue_many` and, in the same script (ENQUEUE_PUSH), the scopes it made ready pushed as
        ``push`` (FairQueue.admission_push) says: the outcomes and the drain tickets taken (messages to send)."""
        return self._enqueue(events, enforce_limits, push)

    def _enqueue(
        self, events: Sequence[PreparedEvent], enforce_limits: bool, push: tuple[list[str], list[Any]] | None
    ) -> tuple[list[EnqueueOutcome], int]:
        if not events:
            return [], 0
        k = self.keys
        self.register_tenant()
        keys = [k.scopes, k.stats, k.runs("paused"), k.runs("all"), k.runs("status", "active")]
        args: list[Any] = [
            now_ms(),
            self.settings.dedupe_window_s,
            self.schedule_ttl_ms,
            k.tenant,
            self.settings.max_inbox_depth if enforce_limits else 0,
            self.settings.tenant_max_queued if enforce_limits else 0,
            self.settings.run_index_max,
        ]
        if push is not None:  # ENQUEUE_PUSH's header: the ready lists' keys, the tickets' cap and TTL
            keys, args = keys + push[0], args + push[1]
        for ev in events:
            ev_keys, ev_args = self._admission(ev)
            keys += ev_keys
            args += ev_args
        script = self.scripts.enqueue_batch if push is None else self.scripts.enqueue_push
        try:
            replies = self.durable(script, keys, args)
        except ResponseError as exc:
            if str(exc).startswith("OVERLIMIT"):
                raise OverLimit.from_reply(
                    str(exc),
                    max_inbox=self.settings.max_inbox_depth,
                    max_queued=self.settings.tenant_max_queued,
                    retry_after_s=self.settings.store_retry_after_s,
                ) from None
            raise
        outcomes = [
            EnqueueOutcome(
                ev.event_id, ev.source_id, ev.scope_key, "accepted" if ok else "duplicate", bool(publish)
            )
            for ev, (ok, publish) in zip(events, replies[: len(events)], strict=True)
        ]
        return outcomes, int(replies[len(events)]) if push is not None else 0

    def _admission(self, ev: PreparedEvent) -> tuple[list[str], list[str]]:
        """One event's keys and arguments as ENQUEUE_BATCH and COMMIT (follow-ups) admit it: its record, inbox,
        drain marker, counter, user index, scope users, source type and scope indexes and source-id bucket;
        its id, scope ref, body, user, source type and id, and its member in the bucket."""
        k, digest = self.keys, source_digest(ev.source_id)
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
            self.client.hincrby(self.keys.stats, "rejected", n)
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
            stale = not isinstance(exc, ResponseError) or str(exc).startswith("MOVED")
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
        places (:data:`~worker.scripts_batch.EVENT_KEYS` and :data:`~worker.scripts_batch.EVENT_ARGS`)."""
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
        k, scope, own = self.keys, commit.scope_key, ""  # own: commit_own's places
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
        follow-ups), in the order of :data:`~worker.scripts_batch.EVENT_KEYS` and ``EVENT_ARGS``."""
        k = self.keys
        followups = [[*keys, *args] for keys, args in map(self._admission, commit.followups)]
        effects = commit.effects.to_json_list() if commit.effects else []
        return (
            [k.event(commit.event_id), k.chain(commit.chain_id or "-")],
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

    # ---- reads -----------------------------------------------------------------------------------

    def get_event(self, event_id: str) -> dict[str, Any] | None:
        """The event's public status record, or None when unknown (or expired)."""
        raw = _str_dict(self.client.hgetall(self.keys.event(event_id)))
        if not raw:
            return None
        return status_record(raw, event_id)

    def get_chain(self, chain_id: str) -> dict[str, Any] | None:
        """The chain document, or None when unknown (or expired). The stored form is bytes (see
        :mod:`worker.chain_document`): read with ``NEVER_DECODE``, so this decoding client hands them over
        untouched (no second client, no base64 in Redis)."""
        raw = self.get_bytes(self.keys.chain(chain_id))
        return None if raw is None else rebuilt_chain(decode_chain(raw))

    def get_bytes(self, key: str) -> bytes | None:
        """A string value as stored (chains and lanes are binary): ``NEVER_DECODE`` on this decoding client."""
        raw: bytes | None = self.client.execute_command("GET", key, NEVER_DECODE=[])  # type: ignore[no-untyped-call]
        return raw

    def chain_event_id(self, chain_id: str) -> str | None:
        """The id of the event whose run wrote the stored chain (None: no chain, or none readable)."""
        raw = self.get_bytes(self.keys.chain(chain_id))
        try:
            return None if raw is None else stored_event_id(decode_chain(raw))
        except ValueError:
            return None

    def stats(self) -> dict[str, int]:
        return {k: int(v) for k, v in _str_dict(self.client.hgetall(self.keys.stats)).items()}

    def inbox_depth(self, scope_key: str) -> int:
        return int(self.client.llen(self.keys.inbox(scope_key)))

    def active_scopes(self) -> list[str]:
        """This tenant's scopes with queued work (bare scope keys)."""
        mine = self.keys.scope_ref("")
        refs = (_str(x) for x in self.client.smembers(self.keys.scopes))
        return sorted(ref[len(mine) :] for ref in refs if ref.startswith(mine))

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
        pipe = self.client.pipeline(transaction=False)
        for tenant in tenants:
            pipe.smembers(self.keys.for_tenant(tenant).scopes)
        return sorted(_str(x) for members in pipe.execute() for x in members)

    # ---- dead letters ----------------------------------------------------------------------------

    def dlq_list(self, *, offset: int = 0, limit: int = 100) -> list[dict[str, Any]]:
        """Dead events, most recent death first, each with payload, attempts and last error."""
        ids = [_str(x) for x in self.client.zrevrange(self.keys.dlq, offset, offset + limit - 1)]
        pipe = self.client.pipeline(transaction=False)
        for event_id in ids:
            pipe.hgetall(self.keys.event(event_id))
        out = []
        for event_id, reply in zip(ids, pipe.execute(), strict=True):
            if reply:
                raw = _str_dict(reply)
                record = status_record(raw, event_id)
                record["event"] = body_of(raw, event_id)
                record["deadAt"] = int(raw.get("deadAt", 0))
                out.append(record)
        return out

    def dlq_size(self) -> int:
        return int(self.client.zcard(self.keys.dlq))

    def dlq_ids(self) -> list[str]:
        return [_str(x) for x in self.client.zrange(self.keys.dlq, 0, -1)]

    def redrive(self, event_id: str, *, body: str = "") -> tuple[bool, str | None, bool]:
        """Requeue one dead event (with ``body`` replacing the stored event, when given); returns (requeued,
        scopeKey, needs a drain task)."""
        found = self.client.hget(self.keys.event(event_id), "scopeKey")
        if found is None:
            return False, None, False
        scope_key = _str(found)
        ok, publish = self.scripts.redrive(
            keys=[
                self.keys.event(event_id),
                self.keys.inbox(scope_key),
                self.keys.scheduled(scope_key),
                self.keys.scopes,
                self.keys.dlq,
                self.keys.stats,
                self.keys.enqueue_seq(scope_key),
                self.keys.runs("paused"),
                self.keys.runs("status", "dead"),
                self.keys.runs("status", "active"),
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
