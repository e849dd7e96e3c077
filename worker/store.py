"""The event store: enqueue with dedupe, per-scope inboxes, fenced begin/commit, dead letters, reads.

All state lives in Redis under :class:`worker.keys.Keys`; each state change is one Lua script from
:mod:`worker.scripts`. This module does no Celery work: callers publish drain tasks when
:meth:`EventStore.enqueue_many` says a scope needs one.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from redis import Redis
from redis.commands.core import Script
from redis.exceptions import RedisError, ResponseError

from worker.context import EffectBuffer
from worker.errors import NotReplicated, OverLimit
from worker.event_records import source_digest, status_record
from worker.keys import Keys
from worker.scripts import Scripts
from worker.settings import Settings

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


def now_ms() -> int:
    return int(time.time() * 1000)


def _str(value: Any) -> str:
    """The clients are built with decode_responses=True; this narrows redis-py's bytes|str for mypy."""
    return value if isinstance(value, str) else value.decode("utf-8")


def _str_dict(raw: Any) -> dict[str, str]:
    return {_str(k): _str(v) for k, v in raw.items()}


@dataclass(frozen=True, slots=True)
class PreparedEvent:
    """A validated event ready to store: its id, scope and canonical JSON (the worker's Source)."""

    event_id: str
    scope_key: str
    source_id: str
    body: str
    source_type: str = ""
    user_id: str | None = None
    tenant: str = "default"


@dataclass(frozen=True, slots=True)
class EnqueueOutcome:
    event_id: str
    source_id: str
    scope_key: str
    status: Literal["accepted", "duplicate"]
    schedule: bool


@dataclass(frozen=True, slots=True)
class Commit:
    """One event's outcome for the fenced COMMIT script. Only ``done`` applies ``effects`` (the chain's staged
    source/signal writes) and admits ``followups`` (the events its handlers emitted)."""

    scope_key: str
    fence: int
    token: str
    event_id: str
    outcome: Literal["done", "dead", "retry", "cancelled"]
    error: str = ""
    not_before_ms: int = 0
    chain_id: str = ""
    chain_json: str = ""
    effects: EffectBuffer = field(default_factory=EffectBuffer)
    followups: Sequence[PreparedEvent] = ()


@dataclass(frozen=True, slots=True)
class CommitReply:
    """1 committed | -1 stale fence | -2 the head is another event | -3 a staged write was refused; scopes whose
    drain must be published (follow-ups that found none scheduled); the outcome committed (``cancelled`` when a
    cancel was requested while the event ran); the next head when the commit went on."""

    code: int
    publish: list[str] = field(default_factory=list)
    head: Head | None = None
    outcome: str = ""
    error: str = ""  # code -3: which staged write was refused or failed, and why
    latency_ms: int | None = None  # done: enqueue to done, by Redis's clock at admission and commit


@dataclass(frozen=True, slots=True)
class Begun:
    """The head event of a scope, taken for processing."""

    event_id: str
    body: str
    attempts: int
    previous_state: str
    last_error: str


@dataclass(frozen=True, slots=True)
class Head:
    """What the scripts' ``take_head`` found: 0 inbox empty (scope released), 3 head waits, 1 head taken."""

    code: int
    begun: Begun | None = None
    not_before_ms: int = 0

    @classmethod
    def parse(cls, reply: Sequence[Any]) -> Head:
        code = int(reply[0])
        if code == 1:
            return cls(
                code,
                Begun(
                    event_id=_str(reply[1]),
                    body=_str(reply[2]),
                    attempts=int(reply[3]),
                    previous_state=_str(reply[4]),
                    last_error=_str(reply[5]),
                ),
            )
        if code == 3:
            return cls(code, not_before_ms=int(float(_str(reply[2]))))
        return cls(code)


class EventStore:
    """Redis-backed events, inboxes and dead letters for one key prefix and one tenant (``for_tenant``
    gives the same store for another: same client and scripts, keys bound to that tenant)."""

    def __init__(self, client: Redis, settings: Settings, *, tenant: str = "default") -> None:
        self.client = client
        self.settings = settings
        self.keys = Keys(settings.key_prefix, tenant)
        self.scripts = Scripts.register(client).for_tenant(self.keys)

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
        if not events:
            return []
        k = self.keys
        keys = [k.scopes, k.stats, k.tenants, k.runs("paused"), k.runs("all"), k.runs("status", "active")]
        args: list[Any] = [
            now_ms(),
            self.settings.dedupe_window_s,
            self.schedule_ttl_ms,
            k.tenant,
            self.settings.max_inbox_depth if enforce_limits else 0,
            self.settings.tenant_max_queued if enforce_limits else 0,
            self.settings.run_index_max,
        ]
        for ev in events:
            ev_keys, ev_args = self._admission(ev)
            keys += ev_keys
            args += ev_args
        try:
            replies = self.durable(self.scripts.enqueue_batch, keys, args)
        except ResponseError as exc:
            if str(exc).startswith("OVERLIMIT"):
                raise OverLimit.from_reply(
                    str(exc),
                    max_inbox=self.settings.max_inbox_depth,
                    max_queued=self.settings.tenant_max_queued,
                    retry_after_s=self.settings.store_retry_after_s,
                ) from None
            raise
        return [
            EnqueueOutcome(
                ev.event_id, ev.source_id, ev.scope_key, "accepted" if ok else "duplicate", bool(publish)
            )
            for ev, (ok, publish) in zip(events, replies, strict=True)
        ]

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
        pipe = self.client.pipeline(transaction=False)
        script(keys=list(keys), args=list(args), client=pipe)
        pipe.execute_command("WAIT", wanted, timeout_ms)  # type: ignore[no-untyped-call]
        reply, acked = pipe.execute()
        if int(acked) < wanted:
            raise NotReplicated(wanted, int(acked), timeout_ms)
        return reply

    def commit(self, commit: Commit, *, go_on: bool = False) -> CommitReply:
        """Fenced commit of the head event (see :class:`Commit`); with ``go_on`` the same round trip takes
        the next head, or releases the scope when it is idle."""
        k = self.keys
        followups = [[*keys, *args] for keys, args in map(self._admission, commit.followups)]
        reply = self.durable(
            self.scripts.commit,
            [
                k.inbox(commit.scope_key),
                k.fence(commit.scope_key),
                k.event(commit.event_id),
                k.dlq,
                k.stats,
                k.chain(commit.chain_id or "-"),
                k.lease(commit.scope_key),
                k.scheduled(commit.scope_key),
                k.scopes,
                k.series,
                k.runs("paused"),
                k.runs("all"),
                *(k.runs("status", s) for s in ("active", "done", "dead", "cancelled")),
            ],
            [
                commit.fence,
                commit.event_id,
                commit.outcome,
                now_ms(),
                self.settings.dedupe_window_s,
                commit.error,
                commit.not_before_ms,
                commit.chain_json,
                self.settings.chain_retention_s,
                commit.chain_id,
                commit.token,
                k.scope_ref(commit.scope_key),
                k.event_prefix,
                "1" if go_on else "0",
                json.dumps(commit.effects.to_json_list()),
                json.dumps(followups, ensure_ascii=False),
                self.schedule_ttl_ms,
                self.settings.run_index_max,
            ],
        )
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
        return status_record(raw)

    def get_chain(self, chain_id: str) -> dict[str, Any] | None:
        raw = self.client.get(self.keys.chain(chain_id))
        return None if raw is None else json.loads(raw)

    def stats(self) -> dict[str, int]:
        return {k: int(v) for k, v in _str_dict(self.client.hgetall(self.keys.stats)).items()}

    def inbox_depth(self, scope_key: str) -> int:
        return int(self.client.llen(self.keys.inbox(scope_key)))

    def active_scopes(self) -> list[str]:
        """This tenant's scopes with queued work (bare scope keys)."""
        mine = self.keys.scope_ref("")
        return sorted(ref[len(mine) :] for ref in self.active_scope_refs() if ref.startswith(mine))

    def known_tenants(self) -> list[str]:
        """Every tenant that has enqueued an event (metrics label each tenant's counters)."""
        return sorted(_str(x) for x in self.client.smembers(self.keys.tenants))

    def active_scope_refs(self) -> list[str]:
        """Every tenant's scopes with queued work, as scope refs ``<tenant>/<scopeKey>``."""
        return sorted(_str(x) for x in self.client.smembers(self.keys.scopes))

    # ---- dead letters ----------------------------------------------------------------------------

    def dlq_list(self, *, offset: int = 0, limit: int = 100) -> list[dict[str, Any]]:
        """Dead events, most recent death first, each with payload, attempts and last error."""
        ids = [_str(x) for x in self.client.zrevrange(self.keys.dlq, offset, offset + limit - 1)]
        pipe = self.client.pipeline(transaction=False)
        for event_id in ids:
            pipe.hgetall(self.keys.event(event_id))
        out = []
        for reply in pipe.execute():
            if reply:
                raw = _str_dict(reply)
                record = status_record(raw)
                record["event"] = json.loads(raw["event"])
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


def staged_error(reply: Sequence[Any]) -> str:
    return f"staged write #{int(reply[1])} was not applied: {_str(reply[2])}"
