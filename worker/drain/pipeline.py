"""Draining a scope: the lease, then each head event through the explicit list of steps, then release.

``Pipeline.drain(scopeKey)`` takes the scope lease (the same round trip takes the inbox's head) and runs
:meth:`Pipeline.process_event` for each head, in order. ``process_event`` walks :data:`DEFAULT_STEPS`,
the only place where the order of an event's steps is decided:

    begin         read the stored event; an unreadable one, or one whose earlier deliveries all died with
                  their worker, is decided ``dead`` here
    interpret     run the chain (worker.chain.scheduler); an exception decides ``retry`` (backoff with full jitter)
                  or ``dead`` (PermanentFailure, or the last attempt); LeaseLost stops the event uncommitted;
                  an operator's cancel (worker/ops/scope_control.py) stops it before its next action: ``cancelled``
    project       the chain's document, once the chain finished: its projection's inputs (the whole
                  envelope + record only when traced or in development)
    commit        the fenced COMMIT script: the outcome, the chain's inputs, and (``done`` only) the writes and
                  follow-up events the source and signal handlers staged; the same round trip takes the next
                  head, or releases the scope when the inbox is empty
    after-commit  publish drains for follow-ups' scopes, the observe span, dev snapshots (the event's metrics
                  follow in ``Pipeline.record``; its handler runs are counted when its walk ends, whatever ended it)

A scope is released only inside ACQUIRE or COMMIT, atomically with the empty-inbox check, so an event
appended meanwhile is drained by us or schedules a new drain: never stranded. A head waiting for its retry
time, or a drain that reached ``max_events_per_drain``, hands the scope off (token-checked release that
keeps the scope scheduled); the caller publishes the next drain task.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from worker.chain.chain_document import event_head
from worker.chain.context import Deps
from worker.chain.registry import Registry
from worker.chain.scheduler import ChainScope
from worker.core.clock import now_ms
from worker.core.retry import backoff_ms, should_retry
from worker.drain.batch import drain_in_batches
from worker.drain.lease import LeaseGrant, ScopeLease
from worker.drain.steps import DEFAULT_STEPS, EventWork, Step
from worker.intake.emitter import Emitter, StagedEmits
from worker.keys.layout import Keys, split_scope_ref
from worker.settings import Settings
from worker.store.events import Begun, EventStore, Head
from worker.store.full import FullStoreWait, StoreFullAgain
from worker.telemetry.logs import bind_event, clear_context
from worker.telemetry.recorder import DISABLED, Telemetry

__all__ = ["DEFAULT_STEPS", "DrainOutcome", "EventWork", "Pipeline", "Step"]


log = logging.getLogger(__name__)


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
        steps: Sequence[Step] = DEFAULT_STEPS,
        telemetry: Telemetry = DISABLED,
    ) -> None:
        self.store = store
        self.registry = registry
        self.settings = settings
        self.deps = deps or Deps()
        self.emitter = emitter
        self.publish_drain: Callable[[str], None] = publish_drain or (lambda scope_key: None)
        self.steps = tuple(steps)
        names = [step.name for step in self.steps]
        # The steps a batch commit runs for each of its events once committed (worker/drain/batch.py).
        self._after_commit_steps = self.steps[names.index("commit") + 1 :] if "commit" in names else ()
        self.telemetry = telemetry
        self.lease = ScopeLease(
            store.scripts,
            store.keys,
            ttl_s=settings.lease_ttl_s,
            renew_interval_s=settings.lease_renew_interval_s,
            run=store.durable,
        )
        self._views: dict[str, Pipeline] = {}
        # Source types whose chains met a handler that is not batch-safe: they are not batched again.
        self.unbatchable: set[str] = set()

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
        if self.settings.commit_batch_max > 1:
            return drain_in_batches(self, grant, head)
        processed = 0
        while head.code == 1 and head.begun is not None:
            go_on = processed + 1 < self.settings.max_events_per_drain
            work = self.process_event(grant, head.begun, go_on=go_on)
            if work.reply is None or work.reply.code != 1:
                return DrainOutcome(processed, "lost")
            processed += 1
            if work.reply.head is None:  # max_events_per_drain: let other scopes have a turn
                return self.hand_off(grant, processed, 0)
            head = work.reply.head
        if head.code == 0:
            return DrainOutcome(processed, "idle")  # the script released the scope
        return self.hand_off(grant, processed, max(head.not_before_ms - now_ms(), 0))

    def hand_off(self, grant: LeaseGrant, processed: int, wait_ms: int) -> DrainOutcome:
        """Release the scope but keep it scheduled: the caller publishes its next drain after ``wait_ms``."""
        if not self.lease.hand_off(grant):
            return DrainOutcome(processed, "lost")
        return DrainOutcome(processed, "again", delay_s=wait_ms / 1000)

    def full_wait(self, where: str, lost: threading.Event | None = None) -> FullStoreWait:
        """How this process waits out a full store (worker/store/full.py): a quarter of a task's soft limit."""
        return FullStoreWait(where, budget_s=self.settings.task_soft_time_limit_s / 4, lost=lost)

    def process_event(
        self, grant: LeaseGrant, begun: Begun, *, go_on: bool, batch: bool = False
    ) -> EventWork:
        """Walk the steps for one event inside an ``agent_signal.workflow.run`` span that continues the
        trace of its enqueue; returns what they did (``work.reply`` is None when nothing was committed).
        With ``batch`` the chain runs for a batch commit (worker/drain/batch.py), which commits it later.

        A chain that met a full store decided nothing: after a pause it runs again, in the same delivery (no
        attempt spent; its applied actions are found in their lanes). Past the wait's budget, or with the lease
        lost, the event is left uncommitted at its head, as after any store error."""

        def walk() -> EventWork:
            work = self._process(grant, begun, go_on=go_on, batch=batch)
            if work.store_full:
                raise StoreFullAgain(work)
            return work

        try:
            return self.full_wait("chain", grant.lost).call(walk)
        except StoreFullAgain as exc:
            if not isinstance(exc.value, EventWork):
                raise
            exc.value.lost = True
            return exc.value

    def _process(self, grant: LeaseGrant, begun: Begun, *, go_on: bool, batch: bool) -> EventWork:
        started = time.perf_counter()
        source_type, traceparent = event_head(begun.body, begun.source_type)
        bind_event(eventId=begun.event_id, scopeKey=grant.scope_key, attempt=begun.attempts)
        scope = ChainScope(
            attempt=begun.attempts,
            max_attempts=self.settings.max_attempts,
            keys=self.keys.for_scope(grant.scope_key),  # with scope buckets, its bucket's indexes
            deps=self.deps,
            outbox_retention_s=self.settings.outbox_retention_s,
        )
        work = EventWork(
            grant=grant,
            begun=begun,
            go_on=go_on,
            scope=scope,
            followups=StagedEmits(self.emitter),
            source_type=source_type,
            started_s=started,
        )
        if batch:
            scope.batch, work.lanes = True, []
        scope.emit = work.followups
        try:
            if self.telemetry.tracing:
                attrs = {
                    "agent.signal.scope_key": grant.scope_key,
                    "agent.signal.event_id": begun.event_id,
                    "agent.signal.attempt": begun.attempts,
                }
                with self.telemetry.span(
                    "agent_signal.workflow.run", attrs, parent=self.telemetry.extract(traceparent)
                ):
                    self._walk(work, batch)
            else:  # no span: not even an empty context manager per event
                self._walk(work, batch)
        finally:  # every handler run is counted, committed or not (a lost lease, a store error, a re-run)
            self.telemetry.handler_runs(scope.runs)
            clear_context("eventId", "scopeKey", "attempt", "chainId", "sourceId")
        self.record(work)
        return work

    def _walk(self, work: EventWork, batch: bool) -> None:
        for step in self.steps:
            step(work, self)
            if batch and step.name == "commit":  # the batch commits; after_commit runs the rest
                break

    def after_commit(self, work: EventWork) -> None:
        """What follows a batch commit for one of its events: the steps after ``commit``, then its metrics."""
        for step in self._after_commit_steps:
            step(work, self)
        self.record(work)

    def record(self, work: EventWork) -> None:
        """The event's metrics in one call, once it committed (or was refused by the fence): its chain's
        series when done, its workflow run, its count and latency (its handler runs were counted when its
        steps ended, in :meth:`process_event`)."""
        reply = work.reply
        if reply is not None and reply.code == 1:
            self.telemetry.event_committed(
                tenant=self.store.tenant,
                source_type=work.source_type,
                workflow_status=work.status,
                outcome=reply.outcome,
                duration_ms=(time.perf_counter() - work.started_s) * 1000,
                latency_ms=reply.latency_ms,
                chain=work.chain if work.outcome == "done" else None,
            )
        elif reply is not None and reply.code == -1:
            self.telemetry.fence_rejected(tenant=self.store.tenant)

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
