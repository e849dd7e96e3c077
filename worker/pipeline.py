"""Draining a scope: the lease, then each head event through the explicit list of steps, then release.

``Pipeline.drain(scopeKey)`` takes the scope lease (the same round trip takes the inbox's head) and runs
:meth:`Pipeline.process_event` for each head, in order. ``process_event`` walks :data:`DEFAULT_STEPS`,
the only place where the order of an event's steps is decided:

    begin         read the stored event; an unreadable one, or one whose earlier deliveries all died with
                  their worker, is decided ``dead`` here
    interpret     run the chain (worker.scheduler); an exception decides ``retry`` (backoff with full jitter)
                  or ``dead`` (PermanentFailure, or the last attempt); LeaseLost stops the event uncommitted;
                  an operator's cancel (worker/scope_control.py) stops it before its next action: ``cancelled``
    project       build the chain's projection (LobeHub's envelope + record), once, when the chain finished
    commit        the fenced COMMIT script: the outcome, the projection, and (``done`` only) the writes and
                  follow-up events the source and signal handlers staged; the same round trip takes the next
                  head, or releases the scope when the inbox is empty
    after-commit  publish drains for follow-ups' scopes, metrics and the observe span, dev snapshots

A scope is released only inside ACQUIRE or COMMIT, atomically with the empty-inbox check, so an event
appended meanwhile is drained by us or schedules a new drain: never stranded. A head waiting for its retry
time, or a drain that reached ``max_events_per_drain``, hands the scope off (token-checked release that
keeps the scope scheduled); the caller publishes the next drain task.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from redis.exceptions import RedisError

from worker.chain_document import chain_projection, compact_json, peek_event
from worker.context import Deps, EffectBuffer
from worker.emitter import Emitter, StagedEmits
from worker.errors import LeaseLost, NotReplicated, PermanentFailure, RetryLater, SkipEvent
from worker.fair import FairQueue
from worker.keys import Keys, split_scope_ref
from worker.lease import LeaseGrant, ScopeLease
from worker.logs import bind_event, clear_context
from worker.nodes import Source
from worker.plugin import PluginRuntime
from worker.projection import trace_events
from worker.registry import Registry
from worker.retry import backoff_ms, should_retry
from worker.scheduler import ChainScope, ChainTrace, run_chain
from worker.scope_control import CancellablePort, EventCancelled
from worker.settings import Settings
from worker.snapshots import write_snapshot
from worker.store import Begun, Commit, CommitReply, EventStore, Head, now_ms
from worker.telemetry import DISABLED, Telemetry

__all__ = ["DEFAULT_STEPS", "DrainOutcome", "EventWork", "Pipeline", "Step"]

log = logging.getLogger(__name__)

Outcome = Literal["done", "dead", "retry", "cancelled"]


@dataclass(slots=True)
class EventWork:
    """One event on its way through the steps: what they decided and produced."""

    grant: LeaseGrant
    begun: Begun
    go_on: bool
    scope: ChainScope
    source: Source | None = None
    trace: ChainTrace | None = None
    outcome: Outcome | None = None
    error: str = ""
    not_before_ms: int = 0
    status: str = "error"  # the workflow status metric: generated | error | invalid_payload
    lost: bool = False  # the lease was lost: nothing is committed
    projection: dict[str, Any] | None = None
    reply: CommitReply | None = None
    followups: StagedEmits = field(default_factory=lambda: StagedEmits(None))

    def decide(self, outcome: Outcome, error: str = "") -> None:
        self.outcome, self.error = outcome, error


class Step(Protocol):
    """One step of an event; reads and writes :class:`EventWork`; never raises for the event's own errors."""

    name: str

    def __call__(self, work: EventWork, pipeline: Pipeline) -> None: ...


class Begin:
    """Read the stored event; decide ``dead`` when it is unreadable or used up all its deliveries."""

    name = "begin"

    def __call__(self, work: EventWork, pipeline: Pipeline) -> None:
        try:
            work.source = Source.model_validate_json(work.begun.body)
        except ValueError as exc:
            work.status = "invalid_payload"
            work.decide("dead", f"stored event is unreadable: {exc}")
            return
        bind_event(chainId=work.source.chain.chain_id, sourceId=work.source.source_id)
        max_attempts = pipeline.settings.max_attempts
        if work.begun.attempts > max_attempts:
            previous = f" (last error: {work.begun.last_error})" if work.begun.last_error else ""
            used = work.begun.attempts - 1
            work.decide(
                "dead", f"worker lost while processing; {used} deliveries used of {max_attempts}{previous}"
            )


class Interpret:
    """Run the chain: source handlers, breadth-first signals and actions, idempotent executors."""

    name = "interpret"

    def __call__(self, work: EventWork, pipeline: Pipeline) -> None:
        if work.outcome is not None or work.source is None:
            return
        grant = work.grant
        port = CancellablePort(pipeline.store, grant.scope_key, grant.fence, grant.lost, work.begun.event_id)
        try:
            work.trace = run_chain(
                work.source, pipeline.registry, port, scope=work.scope, telemetry=pipeline.telemetry
            )
        except LeaseLost:
            log.warning("lease lost mid-event; not committing", extra={"eventId": work.begun.event_id})
            work.lost = True
        except EventCancelled:  # an operator cancelled it: nothing staged is committed (CommitStep)
            work.decide("cancelled")
        except SkipEvent:  # nothing to do: commit done without what was staged before the skip
            work.scope.effects.clear()
            work.followups.events.clear()
            work.decide("done")
            work.status = "generated"
        except PermanentFailure as exc:
            work.decide("dead", f"{exc.code}: {exc}")
        except RetryLater as exc:
            pipeline.retry_or_dead(work, f"RetryLater: {exc}", min_delay_s=exc.delay_s)
        except Exception as exc:
            pipeline.retry_or_dead(work, f"{type(exc).__name__}: {exc}")
        else:
            work.decide("done")
            work.status = "generated"


class Project:
    """The chain's projection, built once when the chain ran to its end; the commit stores it."""

    name = "project"

    def __call__(self, work: EventWork, pipeline: Pipeline) -> None:
        if work.trace is None or work.source is None or work.lost:
            return
        work.projection = chain_projection(work.trace, work.source, attempt=work.begun.attempts)


class CommitStep:
    """The fenced commit (and the next head). A stale fence marks the lease lost; a staged write the script
    refuses makes the event dead (committed again without its staged writes); a store error leaves the event
    uncommitted at its inbox head (the next drain after the lease runs out takes it, counting an attempt)."""

    name = "commit"

    def __call__(self, work: EventWork, pipeline: Pipeline) -> None:
        if work.lost or work.outcome is None:
            return
        try:
            work.reply = pipeline.store.commit(self._commit(work), go_on=work.go_on)
            if work.reply.code == -3:
                log.error(
                    "staged write refused: %s", work.reply.error, extra={"eventId": work.begun.event_id}
                )
                work.status = "error"
                work.decide("dead", work.reply.error)
                work.reply = pipeline.store.commit(self._commit(work), go_on=work.go_on)
        except NotReplicated as exc:  # applied on the primary; a failover now would undo it: do not go on
            log.warning("commit not confirmed by replicas (%s)", exc, extra={"eventId": work.begun.event_id})
            work.lost = True
            return
        except RedisError:
            log.exception(
                "commit failed; the event stays at its inbox head", extra={"eventId": work.begun.event_id}
            )
            work.lost = True
            return
        if work.reply.code == 1 and work.reply.outcome == "cancelled":  # cancelled while it ran
            work.outcome = "cancelled"
        elif work.reply.code == -1:
            log.warning("fenced commit rejected (stale lease)", extra={"eventId": work.begun.event_id})
            work.grant.lost.set()
            work.lost = True
        elif work.reply.code == -2:
            log.error("commit found another event at the inbox head", extra={"eventId": work.begun.event_id})
            work.lost = True

    @staticmethod
    def _commit(work: EventWork) -> Commit:
        done = work.outcome == "done"
        return Commit(
            scope_key=work.grant.scope_key,
            fence=work.grant.fence,
            token=work.grant.token,
            event_id=work.begun.event_id,
            outcome=work.outcome or "dead",
            error=work.error,
            not_before_ms=work.not_before_ms,
            chain_id=work.source.chain.chain_id if work.source is not None else "",
            chain_json="" if work.projection is None else compact_json(work.projection),
            effects=work.scope.effects if done else EffectBuffer(),
            followups=work.followups.events if done else (),
        )


class AfterCommit:
    """Drains for follow-ups' scopes; metrics and the observe span; development snapshots (done only)."""

    name = "after-commit"

    def __call__(self, work: EventWork, pipeline: Pipeline) -> None:
        if work.reply is None or work.reply.code != 1:
            return
        for scope_key in work.reply.publish:
            pipeline.publish_drain(scope_key)
        if work.outcome != "done" or work.projection is None or work.trace is None or work.source is None:
            return
        source, trace = work.source, work.trace

        def events() -> list[dict[str, Any]]:
            return trace_events(source, trace.signals, trace.actions, trace.results)

        pipeline.telemetry.persist_projection(work.projection, events)
        if pipeline.settings.env == "development":
            write_snapshot(
                pipeline.settings.tracing_dir, source, work.projection, events(), trace.started_at_ms
            )


DEFAULT_STEPS: Sequence[Step] = (Begin(), Interpret(), Project(), CommitStep(), AfterCommit())


@dataclass(frozen=True, slots=True)
class DrainOutcome:
    """What the caller (the Celery task) should do next for this scope."""

    processed: int
    next: Literal["idle", "again", "busy", "lost"]
    delay_s: float = 0.0


class Pipeline:
    """Drains scopes. One instance per worker process; holds no per-scope state between drains."""

    def __init__(
        self,
        store: EventStore,
        registry: Registry,
        settings: Settings,
        *,
        deps: Deps | None = None,
        emitter: Emitter | None = None,
        publish_drain: Callable[[str], None] | None = None,
        runtime: PluginRuntime | None = None,
        steps: Sequence[Step] = DEFAULT_STEPS,
        telemetry: Telemetry = DISABLED,
    ) -> None:
        self.store = store
        self.registry = registry
        self.settings = settings
        self.deps = deps or Deps()
        self.emitter = emitter
        self.publish_drain: Callable[[str], None] = publish_drain or (lambda scope_key: None)
        self.fair: FairQueue | None = (
            None  # set by build_pipeline: drain_next pops here, re-publishes go here
        )
        self.runtime = runtime  # the plugins' runtime of this process (their Celery tasks use it)
        self.steps = tuple(steps)
        self.telemetry = telemetry
        self.lease = ScopeLease(
            store.scripts,
            store.keys,
            ttl_s=settings.lease_ttl_s,
            renew_interval_s=settings.lease_renew_interval_s,
            run=store.durable,
        )
        self._views: dict[str, Pipeline] = {}

    @property
    def keys(self) -> Keys:
        return self.store.keys

    def for_tenant(self, tenant: str) -> Pipeline:
        """This pipeline bound to ``tenant``: its store, lease, emitter and handlers' keys are that tenant's."""
        if tenant == self.store.tenant:
            return self
        view = self._views.get(tenant)
        if view is None:
            view = copy.copy(self)
            view.store = self.store.for_tenant(tenant)
            view.emitter = self.emitter.for_tenant(tenant) if self.emitter is not None else None
            view.lease = ScopeLease(
                view.store.scripts,
                view.store.keys,
                ttl_s=self.settings.lease_ttl_s,
                renew_interval_s=self.settings.lease_renew_interval_s,
                run=view.store.durable,
            )
            view._views = self._views
            self._views[tenant] = view
        return view

    def drain(self, ref: str, *, holder: str = "") -> DrainOutcome:
        """Drain the scope named by the scope ref ``<tenant>/<scopeKey>`` (what drain tasks carry)."""
        tenant, scope_key = split_scope_ref(ref)
        return self.for_tenant(tenant).drain_scope(scope_key, holder=holder)

    def drain_scope(self, scope_key: str, *, holder: str = "") -> DrainOutcome:
        grant, remaining_ms, head = self.lease.acquire(scope_key, now_ms=now_ms(), holder=holder)
        if grant is None or head is None:
            # Somebody holds the scope. A live holder drains what we were sent for; a dead one's lease
            # runs out in remaining_ms, so look again then (no spinning, one message per TTL).
            return DrainOutcome(0, "busy", delay_s=remaining_ms / 1000 + 0.05)
        attrs = {"agent.signal.scope_key": scope_key, "agent.signal.fence": grant.fence}
        try:
            with self.telemetry.span("agent_signal.scope.drain", attrs) as span:
                outcome = self._drain_heads(grant, head)
                if span is not None:
                    span.set_attribute("agent.signal.processed", outcome.processed)
                    span.set_attribute("agent.signal.drain_next", outcome.next)
                return outcome
        finally:
            self.lease.stop_renewing()

    def _drain_heads(self, grant: LeaseGrant, head: Head) -> DrainOutcome:
        processed = 0
        while head.code == 1 and head.begun is not None:
            go_on = processed + 1 < self.settings.max_events_per_drain
            work = self.process_event(grant, head.begun, go_on=go_on)
            if work.reply is None or work.reply.code != 1:
                return DrainOutcome(processed, "lost")
            processed += 1
            if work.reply.head is None:  # max_events_per_drain: let other scopes have a turn
                return self._hand_off(grant, processed, 0)
            head = work.reply.head
        if head.code == 0:
            return DrainOutcome(processed, "idle")  # the script released the scope
        return self._hand_off(grant, processed, max(head.not_before_ms - now_ms(), 0))

    def _hand_off(self, grant: LeaseGrant, processed: int, wait_ms: int) -> DrainOutcome:
        if not self.lease.hand_off(grant):
            return DrainOutcome(processed, "lost")
        return DrainOutcome(processed, "again", delay_s=wait_ms / 1000)

    def process_event(self, grant: LeaseGrant, begun: Begun, *, go_on: bool) -> EventWork:
        """Walk the steps for one event inside an ``agent_signal.workflow.run`` span that continues the
        trace of its enqueue; returns what they did (``work.reply`` is None when nothing was committed)."""
        started = time.perf_counter()
        source_type, traceparent = peek_event(begun.body)
        bind_event(eventId=begun.event_id, scopeKey=grant.scope_key, attempt=begun.attempts)
        scope = ChainScope(
            attempt=begun.attempts,
            max_attempts=self.settings.max_attempts,
            keys=self.keys,
            deps=self.deps,
            outbox_retention_s=self.settings.outbox_retention_s,
        )
        work = EventWork(
            grant=grant, begun=begun, go_on=go_on, scope=scope, followups=StagedEmits(self.emitter)
        )
        scope.emit = work.followups
        attrs = {
            "agent.signal.scope_key": grant.scope_key,
            "agent.signal.event_id": begun.event_id,
            "agent.signal.attempt": begun.attempts,
        }
        try:
            with self.telemetry.span(
                "agent_signal.workflow.run", attrs, parent=self.telemetry.extract(traceparent)
            ):
                for step in self.steps:
                    step(work, self)
        finally:
            clear_context("eventId", "scopeKey", "attempt", "chainId", "sourceId")
        if work.reply is not None and work.reply.code == 1:
            duration_ms = (time.perf_counter() - started) * 1000
            tenant = self.store.tenant
            self.telemetry.workflow_run(
                status=work.status, source_type=source_type, duration_ms=duration_ms, tenant=tenant
            )
            self.telemetry.event_committed(
                outcome=work.reply.outcome, tenant=tenant, latency_ms=work.reply.latency_ms
            )
        elif work.reply is not None and work.reply.code == -1:
            self.telemetry.fence_rejected(tenant=self.store.tenant)
        return work

    def retry_or_dead(self, work: EventWork, error: str, *, min_delay_s: float = 0.0) -> None:
        """Decide ``retry`` (full-jitter backoff, at least ``min_delay_s``) or, on the last attempt, ``dead``."""
        if not should_retry(work.begun.attempts, self.settings.max_attempts):
            work.decide("dead", error)
            return
        delay_ms = backoff_ms(
            work.begun.attempts, base_ms=self.settings.retry_base_ms, cap_ms=self.settings.retry_cap_ms
        )
        work.decide("retry", error)
        work.not_before_ms = now_ms() + max(delay_ms, int(min_delay_s * 1000))
