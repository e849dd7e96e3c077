"""One event of a drain, before and after its commit: :data:`EVENT_STEPS` run its chain and decide its outcome,
:data:`AFTER_COMMIT` follow its commit. Each step is a plain function of the event's :class:`EventWork` and the
process's :class:`~worker.drain.context.DrainContext`; none raises for the event's own errors.

    begin         read the stored event; an unreadable one, or one whose earlier deliveries all died with their
                  worker, is decided ``dead`` here
    interpret     run the chain (worker/chain/scheduler.py); an exception decides ``retry`` (backoff with full
                  jitter) or ``dead`` (PermanentFailure, or the last attempt); LeaseLost stops the event
                  uncommitted; an operator's cancel stops it before its next action: ``cancelled``
    project       the chain's document, once the chain finished (its inputs are what the commit stores)
    -- the commit (worker/drain/commit.py) --
    publish       drains for the scopes of the follow-ups it admitted
    reindex_late  an event that ended more than the dedupe window after its enqueue indexed again at its end
    observe       the chain's span, and a development snapshot

An event run for a run of several (``lanes`` not None) collects its actions' lanes instead of applying them one by
one (worker/drain/ports.py ``BatchPort``); its commit applies them.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Literal

from worker.chain.chain_document import ChainRun, event_head
from worker.chain.context import ActionPort
from worker.chain.scheduler import ChainScope, ChainTrace, run_chain
from worker.core.clock import now_ms
from worker.core.errors import LeaseLost, NotBatchable, PermanentFailure, RetryLater, SkipEvent
from worker.core.nodes import Source
from worker.core.retry import backoff_ms, should_retry
from worker.documents.snapshots import write_snapshot
from worker.drain.context import DrainContext
from worker.drain.lease import LeaseGrant
from worker.drain.ports import BatchLane, BatchPort, CancellablePort, EventCancelled
from worker.intake.emitter import StagedEmits
from worker.store.records import Begun, CommitReply
from worker.store.replies import CommitCode
from worker.store.server.full import StoreFullAgain, is_store_full
from worker.telemetry.log_privacy import describe_error
from worker.telemetry.logs import end_event, event_ids, start_event
from worker.telemetry.plan import HandlerRuns

__all__ = [
    "AFTER_COMMIT",
    "EVENT_STEPS",
    "EventWork",
    "Outcome",
    "Step",
    "after_commit",
    "count_runs",
    "record",
    "run_event",
]

log = logging.getLogger(__name__)

Outcome = Literal["done", "dead", "retry", "cancelled"]


@dataclass(slots=True)
class EventWork:
    """One event on its way through the steps: what they decided and produced."""

    grant: LeaseGrant
    begun: Begun
    scope: ChainScope  # what every handler of its chain shares: staged writes, follow-ups, handler runs
    followups: StagedEmits
    lanes: list[BatchLane] | None = (
        None  # run for a run of several: its actions' lanes, applied by its commit
    )
    source: Source | None = None
    trace: ChainTrace | None = None
    chain: ChainRun | None = None  # the finished chain's document (project), read by the commit and after
    outcome: Outcome | None = None
    error: str = ""
    not_before_ms: int = 0
    status: str = "error"  # the workflow status metric: generated | error | invalid_payload
    lost: bool = False  # nothing is committed: the lease was lost, or the store would not take the commit
    unbatchable: bool = False  # its chain met a handler that is not batch-safe: nothing was decided
    store_full: bool = False  # its chain met a full store: nothing was decided (run again after a pause)
    reply: CommitReply | None = None
    # the lanes its run found marked or marked (run alone), or its run's commit marked: a commit that does not end
    # it (retry, dead) keeps them until it ends (worker/store/lua/lib/kept_lanes.lua)
    marked_lanes: dict[str, None] = field(default_factory=dict)
    source_type: str = "unknown"
    # its walk's handler runs, not counted yet: with its commit's metrics (record), else by count_runs
    runs: HandlerRuns | None = None
    started_s: float = field(default_factory=time.perf_counter)  # the workflow-run duration's start

    def decide(self, outcome: Outcome, error: str = "") -> None:
        self.outcome, self.error = outcome, error

    def retry_or_dead(self, ctx: DrainContext, error: str, *, min_delay_s: float = 0.0) -> None:
        """Decide ``retry`` (full-jitter backoff, at least ``min_delay_s``) or, on the last attempt, ``dead``."""
        settings = ctx.settings
        if not should_retry(self.begun.attempts, settings.max_attempts):
            self.decide("dead", error)
            return
        delay_ms = backoff_ms(
            self.begun.attempts, base_ms=settings.retry_base_ms, cap_ms=settings.retry_cap_ms
        )
        self.decide("retry", error)
        # RetryLater's delay is capped like the backoff: a retry is a countdown message, and one longer than the
        # broker's visibility timeout is delivered again and again (celery#2481; check_settings keeps the cap
        # below it)
        asked_ms = min(int(min_delay_s * 1000), settings.retry_cap_ms)
        self.not_before_ms = now_ms() + max(delay_ms, asked_ms)


Step = Callable[[EventWork, DrainContext], None]


def begin(work: EventWork, ctx: DrainContext) -> None:
    """Read the stored event; decide ``dead`` when it is unreadable or used up all its deliveries."""
    try:
        work.source = Source.model_validate_json(work.begun.source_json(work.grant.scope_key))
    except ValueError as exc:
        work.status = "invalid_payload"
        work.decide("dead", f"stored event is unreadable: {exc}")
        return
    event_ids(chainId=work.source.chain.chain_id, sourceId=work.source.source_id)
    max_attempts = ctx.settings.max_attempts
    if work.begun.attempts > max_attempts:
        previous = f" (last error: {work.begun.last_error})" if work.begun.last_error else ""
        used = work.begun.attempts - 1
        work.decide(
            "dead", f"worker lost while processing; {used} deliveries used of {max_attempts}{previous}"
        )


def interpret(work: EventWork, ctx: DrainContext) -> None:
    """Run the chain: source handlers, breadth-first signals and actions, idempotent executors."""
    if work.outcome is not None or work.source is None:
        return
    grant, event_id = work.grant, work.begun.event_id
    port: ActionPort
    if work.lanes is not None:
        port = BatchPort(
            grant.keys,
            grant.scope_key,
            grant.lost,
            work.lanes,
            retention_s=ctx.settings.outbox_retention_s,
            event_id=event_id,
            fence=grant.fence,
        )
    else:
        port = CancellablePort(ctx.store, grant.keys, grant.scope_key, grant.fence, grant.lost, event_id)
        work.marked_lanes = port.marked  # filled as the chain runs
    # an event in its user's own scope (a user token's) keeps its follow-ups in that user's own scopes
    work.followups.confine(grant.scope_key, work.source.user_id)
    try:
        work.trace = run_chain(work.source, ctx.registry, port, scope=work.scope, telemetry=ctx.telemetry)
    except NotBatchable:  # pure so far (batch-safe handlers only): run it again on its own
        work.unbatchable = True
    except LeaseLost:
        log.warning("lease lost mid-event; not committing", extra={"eventId": event_id})
        work.lost = True
    except EventCancelled:  # an operator cancelled it: nothing staged is committed
        work.decide("cancelled")
    except SkipEvent:  # nothing to do: commit done without what was staged before the skip
        work.scope.effects.clear()
        work.followups.events.clear()
        work.decide("done")
        work.status = "generated"
    except PermanentFailure as exc:
        work.decide("dead", f"{exc.code}: {exc}")
    except RetryLater as exc:
        work.retry_or_dead(ctx, f"RetryLater: {exc}", min_delay_s=exc.delay_s)
    except Exception as exc:
        if is_store_full(exc) or (exc.__cause__ is not None and is_store_full(exc.__cause__)):
            work.store_full = True  # not the event's fault: no attempt spent (run_event runs it again)
            return
        work.retry_or_dead(ctx, f"{type(exc).__name__}: {exc}")
    else:
        work.decide("done")
        work.status = "generated"


def project(work: EventWork, ctx: DrainContext) -> None:
    """The chain's document, once the chain ran to its end: the commit stores its inputs; the whole projection is
    built only if the observe span or a development snapshot reads it (worker/chain/chain_document.py)."""
    if work.trace is None or work.source is None or work.lost:
        return
    work.chain = ChainRun(work.trace, work.source, attempt=work.begun.attempts)


def publish(work: EventWork, ctx: DrainContext) -> None:
    """Drains for the scopes of the follow-ups its commit admitted that found none scheduled."""
    if work.reply is not None:
        for ref in work.reply.publish:
            ctx.publish(ref)


def observe(work: EventWork, ctx: DrainContext) -> None:
    """The chain's span (its metrics are counted with the event's: :func:`record`); a development snapshot; a
    warning for an event that went to the dead-letter list (an audit found none: a DLQ filled without a line)."""
    chain = work.chain
    if work.outcome == "dead":
        _say_dead(work)
    if work.outcome != "done" or chain is None:
        return
    ctx.telemetry.observe_chain(chain)
    if ctx.settings.env == "development":
        write_snapshot(
            ctx.settings.tracing_dir,
            chain.source,
            chain.projection(),
            chain.events(),
            chain.trace.started_at_ms,
        )


_ERROR_KIND = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,79}")


def _say_dead(work: EventWork) -> None:
    """One warning for an event its commit put on the dead-letter list: its id, type and attempts, and the kind
    of its error (the code or exception class before the first ``:``), never the error's text, which may quote
    the event (worker/telemetry/log_privacy.py)."""
    reply = work.reply
    if reply is None or reply.code is not CommitCode.COMMITTED:
        return
    head = work.error.partition(":")[0].strip()
    kind = head if _ERROR_KIND.fullmatch(head) else "error"
    log.warning(
        "event dead-lettered after %d attempt(s) (%s)",
        work.begun.attempts,
        kind,
        extra={"eventId": work.begun.event_id, "sourceType": work.source_type},
    )


EVENT_STEPS: Sequence[Step] = (begin, interpret, project)


def reindex_late(work: EventWork, ctx: DrainContext) -> None:
    """An event that ended more than the dedupe window after its enqueue indexed again at its end (its indexes
    had dropped it while it waited: worker/store/lua/reindex_late.lua). A done event's commit says how long it
    waited; a dead one (rare) is left to the script to tell."""
    reply, source = work.reply, work.source
    if reply is None or reply.code is not CommitCode.COMMITTED or source is None:
        return
    window_ms = ctx.settings.dedupe_window_s * 1000
    late = reply.outcome == "dead" or (
        reply.outcome == "done" and reply.latency_ms is not None and reply.latency_ms > window_ms
    )
    if late:
        ctx.store.reindex_late(
            work.grant.keys,
            work.begun.event_id,
            scope_key=work.grant.scope_key,
            source_type=source.source_type,
            source_id=source.source_id,
            user_id=source.user_id or "",
        )


AFTER_COMMIT: Sequence[Step] = (publish, reindex_late, observe)


def run_event(ctx: DrainContext, grant: LeaseGrant, begun: Begun, *, batch: bool) -> EventWork:
    """Walk :data:`EVENT_STEPS` for one head event inside an ``agent_signal.workflow.run`` span that continues
    the trace of its enqueue; ``batch``: its actions' lanes wait for its commit.

    A chain that met a full store decided nothing: after a pause it runs again, in the same delivery (no attempt
    spent; its applied actions are found in their lanes). Past the wait's budget, or with the lease lost, the
    event is left uncommitted at its head (``lost``), as after any store error."""

    def walk() -> EventWork:
        work = _walk(ctx, grant, begun, batch=batch)
        if work.store_full:
            count_runs(ctx, work)  # this walk decided nothing: the next one counts its own runs
            raise StoreFullAgain(work)
        return work

    try:
        return ctx.full_wait("chain", grant.lost).call(walk)
    except StoreFullAgain as exc:
        if not isinstance(exc.value, EventWork):
            raise
        exc.value.lost = True
        return exc.value


def _walk(ctx: DrainContext, grant: LeaseGrant, begun: Begun, *, batch: bool) -> EventWork:
    source_type, traceparent = event_head(begun.body, begun.source_type)
    start_event(eventId=begun.event_id, scopeKey=grant.scope_key, attempt=begun.attempts)
    scope = ChainScope(
        attempt=begun.attempts,
        max_attempts=ctx.settings.max_attempts,
        keys=grant.keys,  # the scope's tenant's, its bucket's
        deps=ctx.deps,
        outbox_retention_s=ctx.settings.outbox_retention_s,
        batch=batch,
        lane_form=begun.lane_form,
    )
    work = EventWork(
        grant,
        begun,
        scope,
        StagedEmits(ctx.emitter, grant.keys.tenant),
        [] if batch else None,
        source_type=source_type,
    )
    scope.emit = work.followups
    telemetry = ctx.telemetry
    try:
        if telemetry.tracing:
            attrs = {
                "agent.signal.scope_key": grant.scope_key,
                "agent.signal.event_id": begun.event_id,
                "agent.signal.attempt": begun.attempts,
            }
            with telemetry.span("agent_signal.workflow.run", attrs, parent=telemetry.extract(traceparent)):
                for step in EVENT_STEPS:
                    step(work, ctx)
        else:  # no span: not even an empty context manager per event
            for step in EVENT_STEPS:
                step(work, ctx)
    except BaseException:  # a walk that raised: nothing commits it, its handler runs are counted now
        telemetry.handler_runs(scope.runs)
        raise
    finally:
        end_event()
    if telemetry.enabled:  # counted with its commit's metrics in one plan (record), or by count_runs
        work.runs = scope.runs
    return work


def count_runs(ctx: DrainContext, work: EventWork) -> None:
    """Count the handler runs of a walk that no commit counted (a lost lease, a store error, a refused fence,
    a speculation run again alone, a full store): every walk's runs are counted once, committed or not."""
    runs, work.runs = work.runs, None
    if runs is not None:
        ctx.telemetry.handler_runs(runs)


def after_commit(ctx: DrainContext, work: EventWork) -> None:
    """What follows an event's commit: :data:`AFTER_COMMIT`, then its metrics. The event is committed: a step
    that fails (a store error keeping its lanes, the telemetry exporter) is logged, and the drain goes on rather
    than leave the scope's lease held until it runs out."""
    for step in AFTER_COMMIT:
        _contained(work, step.__name__, partial(step, work, ctx))
    _contained(work, "record", partial(record, ctx, work))


def _contained(work: EventWork, name: str, call: Callable[[], None]) -> None:
    """Run one step after the commit; a failure is logged (contained, and loud: STYLE §1.2)."""
    try:
        call()
    except Exception as exc:
        log.critical(
            "a step after the commit failed",
            extra={"eventId": work.begun.event_id, "step": name, "error": describe_error(exc)},
        )


def record(ctx: DrainContext, work: EventWork) -> None:
    """The event's metrics in one call, once it committed (or was refused by the fence): its chain's series when
    done, its workflow run, its count and latency, and its walk's handler runs (one plan for all of them)."""
    reply, tenant = work.reply, work.grant.keys.tenant
    if reply is not None and reply.code is CommitCode.COMMITTED:
        # its follow-ups the commit admitted: events the service enqueued itself (origin follow_up)
        admitted = ["accepted"] * reply.followups_accepted + ["duplicate"] * reply.followups_duplicate
        if admitted:
            ctx.telemetry.follow_ups(admitted, tenant)
        ctx.telemetry.event_committed(
            tenant=tenant,
            source_type=work.source_type,
            workflow_status=work.status,
            outcome=reply.outcome,
            duration_ms=(time.perf_counter() - work.started_s) * 1000,
            latency_ms=reply.latency_ms,
            chain=work.chain if work.outcome == "done" else None,
            runs=work.runs,
        )
        work.runs = None  # counted (if the call raised, the drain's count_runs counts them)
    elif reply is not None and reply.code is CommitCode.STALE_FENCE:
        ctx.telemetry.fence_rejected(tenant=tenant)
    count_runs(ctx, work)
