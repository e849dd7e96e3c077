"""Operators' control of scopes and events: pause and resume a scope, cancel an event, list scopes by state.

* **Pause** marks the scope in the tenant's ``runs:paused`` hash. Its next drain takes the lease and stops
  without taking the head (ACQUIRE, or COMMIT's continuation after the event in flight), releasing the scope:
  its events wait in its inbox, and new ones are appended without scheduling a drain. **Resume** forgets the
  mark and, when the inbox holds events, schedules the drain again through the fair queue (worker/runtime/fair.py).
* **Cancel** (worker/store/lua/cancel.lua): a queued event is cancelled at once and never runs (the drain
  pops it); a running one gets ``cancelRequested``: the drain's action port (``CancellablePort``, worker/drain/ports.py) reads that flag in the same round
  trip as each action's idempotency lookup and raises :class:`EventCancelled` before the next action runs, and
  COMMIT turns the event ``cancelled`` without its chain's staged writes or follow-ups (actions already applied
  stay applied: they committed with their own lanes).
* **Scopes by state**: ``busy`` (lease held), ``paused``, ``stuck`` (queued, no lease, not waiting on its
  tenant's fair-share ready list, and no scheduled drain, or a drain marker older than the lease TTL while the
  head is not waiting for a retry time), ``waiting`` (queued, no lease, otherwise). They are listed in scope-key
  order, a page at a time (:func:`scope_page`): a page's ``cursor`` is its last scope key, and the next page
  starts after it.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from dataclasses import dataclass
from typing import Any, Literal

from redis.exceptions import RedisError

from worker.core.clock import now_ms
from worker.keys.layout import HOLDER_SEPARATOR, Keys
from worker.ops.audit import CLI_ACTOR, audit
from worker.store.calls import Cancel, Resume, ScopeProbe, ScopeStates
from worker.store.events import EventStore
from worker.store.replies import CancelCode
from worker.telemetry.log_privacy import describe_error
from worker.telemetry.pseudonyms import load_pseudonyms

__all__ = [
    "PROBE_CHUNK",
    "SCOPE_STATES",
    "CancelResult",
    "ScopePage",
    "TooManyPaused",
    "cancel_event",
    "list_scopes",
    "pause_scope",
    "resume_scope",
    "scope_page",
]

log = logging.getLogger(__name__)

ScopeState = Literal["busy", "waiting", "stuck", "paused"]
SCOPE_STATES: tuple[ScopeState, ...] = ("busy", "waiting", "stuck", "paused")
# scopes per SCOPE_STATES call: ~1.2 ms of Redis's time each (12 µs a scope, measured), so none holds it long
PROBE_CHUNK = 100


class TooManyPaused(Exception):
    """The tenant holds ``AGENT_SIGNAL_TENANT_MAX_PAUSED_SCOPES`` paused scopes already."""

    def __init__(self, paused: int, limit: int) -> None:
        super().__init__(
            f"this tenant holds {paused} paused scopes (its limit is {limit}, "
            "AGENT_SIGNAL_TENANT_MAX_PAUSED_SCOPES); resume one first"
        )
        self.paused, self.limit = paused, limit


def pause_scope(store: EventStore, tenant: Keys, scope_key: str, *, actor: str = CLI_ACTOR) -> bool:
    """Pause the tenant's scope; False when it already was. TooManyPaused when the tenant is at its limit of
    paused scopes (a mark has no TTL: any scope key may be paused, with or without events, and the scope listing
    reads every mark). Two pauses racing at the limit may both pass: the limit bounds the marks, not exactly. A
    pause that took is audited with ``actor`` (worker/ops/audit.py)."""
    paused = tenant.for_scope(scope_key).runs("paused")
    limit = store.settings.tenant_max_paused_scopes
    if limit:
        pipe = store.client.pipeline(transaction=False)
        pipe.hexists(paused, scope_key)
        for b in tenant.every_bucket():
            pipe.hlen(b.runs("paused"))
        already, *counts = pipe.execute()
        held = sum(int(n) for n in counts)
        if not already and held >= limit:
            raise TooManyPaused(held, limit)
    changed = bool(store.client.hsetnx(paused, scope_key, now_ms()))
    if changed:
        _audit_scope(store, tenant, "scope.pause", actor, scope_key)
    return changed


def resume_scope(
    store: EventStore, tenant: Keys, scope_key: str, publish: Any, *, actor: str = CLI_ACTOR
) -> bool:
    """Resume the tenant's scope and, when it has queued events and no drain scheduled, ``publish(scopeRef)``
    one; False when it was not paused (a resume that took is audited with ``actor``)."""
    k = tenant.for_scope(scope_key)
    was, schedule = store.scripts.run(
        Resume(
            paused=k.runs("paused"),
            inbox=k.inbox(scope_key),
            scopes=k.scopes,
            sched=k.scheduled(scope_key),
            scope_key=scope_key,
            scope_ref=k.scope_ref(scope_key),
            sched_ttl_ms=store.schedule_ttl_ms,
        )
    )
    if int(schedule):
        publish(k.scope_ref(scope_key))
    if int(was):
        _audit_scope(store, tenant, "scope.resume", actor, scope_key)
    return bool(int(was))


def _audit_scope(store: EventStore, tenant: Keys, action: str, actor: str, scope_key: str) -> None:
    """The audit entry of a scope's pause or resume: its key as a pseudonym (a scope key may name a user)."""
    scope = load_pseudonyms(store.client, store.settings).of(scope_key)
    audit(store.client, tenant, "ops", action, actor, scope=scope)


@dataclass(frozen=True, slots=True)
class CancelResult:
    """What a cancel found (:class:`~worker.store.replies.CancelCode`), the event's state now, and whether this
    call changed it (``changed``: cancelled it, or asked a running one to stop; not a cancel found done or asked
    already)."""

    code: CancelCode
    state: str
    changed: bool = False

    @property
    def now(self) -> bool:
        """This call cancelled the event (a queued one; not one cancelled already, nor a running one's request)."""
        return self.changed and self.code is CancelCode.CANCELLED


def cancel_event(store: EventStore, tenant: Keys, event_id: str, *, actor: str = CLI_ACTOR) -> CancelResult:
    """Cancel one of the tenant's events (CANCEL: worker/store/lua/cancel.lua); a cancel that took (the event
    cancelled, or its cancel requested) is audited with ``actor``."""
    k = store.locate(tenant, event_id)
    reply = store.scripts.run(
        Cancel(
            ev=k.event(event_id),
            stats=k.stats,
            runs_active=k.runs("status", "active"),
            runs_cancelled=k.runs("status", "cancelled"),
            lane_holders=k.lane_holders,
            event_id=event_id,
            now_ms=now_ms(),
            window_s=store.settings.dedupe_window_s,
            run_index_max=store.settings.run_index_max,
            lane_ttl_s=store.settings.idempotency_ttl_s,
        )
    )
    result = CancelResult(CancelCode(int(reply[0])), str(reply[1]), len(reply) > 2)
    if result.changed:
        audit(store.client, tenant, "ops", "event.cancel", actor, eventId=event_id, state=result.state)
    return result


@dataclass(frozen=True, slots=True)
class ScopePage:
    """One page of a tenant's scopes in a state, by scope key: ``cursor`` (the last row's scope key) when more
    follow it, and ``total``, the scopes in that state on every page (in every state: the scopes listed, see
    :func:`scope_page`)."""

    scopes: list[dict[str, Any]]
    cursor: str | None
    total: int


def list_scopes(
    store: EventStore, k: Keys, state: ScopeState | None = None, *, limit: int = 200
) -> list[dict[str, Any]]:
    """``k``'s tenant's scopes with queued events, and its paused ones, in ``state`` (all when None): the first
    ``limit`` by scope key."""
    return scope_page(store, k, state, limit=limit).scopes


def scope_page(
    store: EventStore, k: Keys, state: ScopeState | None = None, *, limit: int = 200, after: str | None = None
) -> ScopePage:
    """The ``limit`` scopes in ``state`` (all when None) that follow ``after`` in scope-key order (from the
    first when None); the page's ``cursor`` is set when more follow it. A state is known only by reading a scope,
    so a page of one state reads every scope; a page of all reads its own scopes only, :data:`PROBE_CHUNK` at a
    time until it is full, and its ``total`` counts the scopes listed (a scope drained since it was listed, which
    its release takes out of the list, counted until it is: the page itself skips it)."""
    paused = _paused(store, k)
    scopes = sorted(set(store.active_scopes(k)) | set(paused))
    ready = _ReadyList(store, k)
    if state is not None:
        rows = [row for row in _scope_rows(store, k, scopes, paused, ready) if row["state"] == state]
        following = [row for row in rows if after is None or row["scopeKey"] > after]
        page = following[:limit]
        cursor = str(page[-1]["scopeKey"]) if len(following) > limit else None
        return ScopePage(page, cursor, len(rows))
    start = bisect_right(scopes, after) if after is not None else 0
    page, drained, end = [], 0, start
    while len(page) < limit and end < len(scopes):
        chunk = scopes[end : end + max(PROBE_CHUNK, limit - len(page))]
        end += len(chunk)
        rows = _scope_rows(store, k, chunk, paused, ready)
        drained += len(chunk) - len(rows)
        page += rows
    more = len(page) > limit or end < len(scopes)
    page = page[:limit]
    cursor = str(page[-1]["scopeKey"]) if more and page else None
    return ScopePage(page, cursor, len(scopes) - drained)


def _paused(store: EventStore, k: Keys) -> dict[str, int]:
    """``k``'s tenant's paused scopes, with when each was paused (ms)."""
    pipe = store.client.pipeline(transaction=False)
    for keys in k.every_bucket():
        pipe.hgetall(keys.runs("paused"))
    return {str(s): int(at) for reply in pipe.execute() for s, at in reply.items()}


class _ReadyList:
    """The tenant's ready list (StoreReads.ready_refs), read once a page finds a scope that looks stuck."""

    def __init__(self, store: EventStore, k: Keys) -> None:
        self.store, self.k = store, k
        self._refs: set[str] | None = None

    def waiting(self, scope: str) -> bool:
        if self._refs is None:
            try:
                self._refs = self.store.ready_refs(self.k)
            except RedisError as exc:  # the {fair} slot moving or down: the tenant's own scopes still list
                log.warning("scope listing: the ready lists could not be read (%s)", describe_error(exc))
                self._refs = set()
        return self.k.scope_ref(scope) in self._refs


def _scope_rows(
    store: EventStore, k: Keys, scopes: list[str], paused: dict[str, int], ready: _ReadyList
) -> list[dict[str, Any]]:
    """The rows of ``scopes`` (``k``'s tenant's, by scope key) with their state, but those drained since they were
    listed. Each bucket's scopes are read by SCOPE_STATES, :data:`PROBE_CHUNK` at a time, the chunks in one
    pipeline: a pipeline of five reads per scope and one per head cost ~0.4 s of this process's CPU for 6,000
    scopes."""
    by_bucket: dict[int, list[str]] = {}
    for scope in scopes:
        by_bucket.setdefault(k.for_scope(scope).bucket, []).append(scope)
    order: list[str] = []
    calls: list[ScopeStates] = []
    for bucket, members in by_bucket.items():
        prefix = k.for_bucket(bucket).event_prefix
        for i in range(0, len(members), PROBE_CHUNK):
            chunk = members[i : i + PROBE_CHUNK]
            order += chunk
            probes = [ScopeProbe(k.inbox(s), k.lease(s), k.scheduled(s)) for s in chunk]
            calls.append(ScopeStates(ev_prefix=prefix, probes=probes))
    values = [value for reply in store.scripts.run_batch(calls) for value in reply]
    read = {scope: values[i * 6 : i * 6 + 6] for i, scope in enumerate(order)}
    now, ttl_ms = now_ms(), int(store.settings.lease_ttl_s * 1000)
    out: list[dict[str, Any]] = []
    for scope in scopes:
        depth, holder, sched_ttl_ms, marker, enqueued, not_before_ms = read[scope]
        not_before = int(float(not_before_ms or 0)) if enqueued else 0
        # the marker's age by its PTTL, not by the time in it (the writer's clock: a web replica's may run ahead)
        age_ms = store.marker_age_ms(int(sched_ttl_ms), marker or None)
        stale = age_ms is None or (age_ms > ttl_ms and not_before <= now)
        if stale and not holder and int(depth) and scope not in paused:
            # on its ready list it waits its turn behind a backlog: a drain_next message will pop it
            stale = not ready.waiting(scope)
        found: ScopeState
        if scope in paused:
            found = "paused"
        elif holder:
            found = "busy"
        elif int(depth) == 0:
            continue  # drained since it was listed
        else:
            found = "stuck" if stale else "waiting"
        row: dict[str, Any] = {
            "scopeKey": scope,
            "state": found,
            "inboxDepth": int(depth),
            "paused": scope in paused,
        }
        if holder:
            row["leaseHolder"] = str(holder).rpartition(HOLDER_SEPARATOR)[0] or str(holder)  # the worker
        if enqueued:
            row["headAgeMs"] = max(now - int(enqueued), 0)
        if scope in paused:
            row["pausedAt"] = paused[scope]
        out.append(row)
    return out
