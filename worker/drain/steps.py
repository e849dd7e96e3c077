"""The steps an event goes through, in :data:`DEFAULT_STEPS` order (worker/drain/pipeline.py's docstring says what
each decides): each reads and writes one :class:`EventWork`, and never raises for the event's own errors."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from redis.exceptions import RedisError

from worker.chain.chain_document import ChainRun
from worker.chain.context import ActionPort, EffectBuffer
from worker.chain.scheduler import ChainScope, ChainTrace, run_chain
from worker.core.errors import (
    LeaseLost,
    NotBatchable,
    NotReplicated,
    PermanentFailure,
    RetryLater,
    SkipEvent,
)
from worker.core.nodes import Source
from worker.documents.snapshots import write_snapshot
from worker.drain.action_port import CancellablePort, EventCancelled
from worker.drain.batch_port import BatchPort, Lane
from worker.drain.lease import LeaseGrant
from worker.intake.emitter import StagedEmits
from worker.store.events import Begun, Commit, CommitReply
from worker.store.full import is_store_full
from worker.telemetry.log_privacy import describe_error, refusal_kind
from worker.telemetry.logs import bind_event

if TYPE_CHECKING:
    from worker.drain.pipeline import Pipeline

__all__ = [
    "DEFAULT_STEPS",
    "AfterCommit",
    "Begin",
    "CommitStep",
    "EventWork",
    "Interpret",
    "Outcome",
    "Project",
    "Step",
]

log = logging.getLogger("worker.drain.pipeline")


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
    chain: ChainRun | None = None  # the finished chain's document (Project), read by the commit and after
    reply: CommitReply | None = None
    followups: StagedEmits = field(default_factory=lambda: StagedEmits(None))
    source_type: str = "unknown"
    started_s: float = 0.0  # perf_counter when its steps began (the workflow-run duration)
    lanes: list[Lane] | None = (
        None  # run for a batch (worker/drain/batch.py): its actions' lanes, committed there
    )
    unbatchable: bool = False  # the batch's chain met a handler that is not batch-safe: nothing was decided
    store_full: bool = False  # the chain met a full store: nothing was decided, the pipeline runs it again

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
            work.source = Source.model_validate_json(work.begun.source_json(work.grant.scope_key))
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
        port: ActionPort
        if work.lanes is not None:
            port = BatchPort(
                pipeline.keys,
                grant.scope_key,
                grant.lost,
                work.lanes,
                retention_s=pipeline.settings.outbox_retention_s,
                event_id=work.begun.event_id,
                fence=grant.fence,
            )
        else:
            port = CancellablePort(
                pipeline.store, grant.scope_key, grant.fence, grant.lost, work.begun.event_id
            )
        try:
            work.trace = run_chain(
                work.source, pipeline.registry, port, scope=work.scope, telemetry=pipeline.telemetry
            )
        except NotBatchable:  # pure so far (batch-safe handlers only): run it again on its own
            work.unbatchable = True
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
            if is_store_full(exc) or (exc.__cause__ is not None and is_store_full(exc.__cause__)):
                work.store_full = True  # not the event's fault: no attempt spent (Pipeline.process_event)
                return
            pipeline.retry_or_dead(work, f"{type(exc).__name__}: {exc}")
        else:
            work.decide("done")
            work.status = "generated"


class Project:
    """The chain's document, once the chain ran to its end: the commit stores its inputs; the whole projection
    is built only if the observe span or a development snapshot reads it (worker/chain/chain_document.py)."""

    name = "project"

    def __call__(self, work: EventWork, pipeline: Pipeline) -> None:
        if work.trace is None or work.source is None or work.lost:
            return
        work.chain = ChainRun(work.trace, work.source, attempt=work.begun.attempts)


class CommitStep:
    """The fenced commit (and the next head). A stale fence marks the lease lost; a staged write the script
    refuses makes the event dead (committed again without its staged writes); a full store is waited out (the
    same commit again, worker/store/full.py); any other store error leaves the event uncommitted at its inbox
    head (the next drain after the lease runs out takes it, counting an attempt)."""

    name = "commit"

    def __call__(self, work: EventWork, pipeline: Pipeline) -> None:
        if work.lost or work.outcome is None or work.lanes is not None:  # a batch commits its own
            return
        store, full = pipeline.store, pipeline.full_wait("commit", work.grant.lost)
        try:
            work.reply = full.call(lambda: store.commit(self.commit_of(work), go_on=work.go_on))
            if work.reply.code == -3:
                log.error(
                    "staged write refused (%s)",
                    refusal_kind(work.reply.error),
                    extra={"eventId": work.begun.event_id},
                )
                work.status = "error"
                work.decide("dead", work.reply.error)
                work.reply = full.call(lambda: store.commit(self.commit_of(work), go_on=work.go_on))
        except NotReplicated as exc:  # applied on the primary; a failover now would undo it: do not go on
            log.warning(
                "commit not confirmed by replicas (%s)",
                describe_error(exc),
                extra={"eventId": work.begun.event_id},
            )
            work.lost = True
            return
        except RedisError:
            log.exception(
                "commit not acknowledged; the next drain finds out what it applied",
                extra={"eventId": work.begun.event_id},
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
    def commit_of(work: EventWork) -> Commit:
        """What the fenced commit of ``work`` stores (a batch commit takes the same, per event)."""
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
            chain_json=b"" if work.chain is None else work.chain.stored_json(),
            source_id=work.source.source_id if work.source is not None else "",
            effects=work.scope.effects if done else EffectBuffer(),
            followups=work.followups.events if done else (),
        )


class AfterCommit:
    """Drains for follow-ups' scopes; the observe span; development snapshots (done only). The event's metrics
    follow in Pipeline.record."""

    name = "after-commit"

    def __call__(self, work: EventWork, pipeline: Pipeline) -> None:
        if work.reply is None or work.reply.code != 1:
            return
        for scope_key in work.reply.publish:
            pipeline.publish_drain(scope_key)
        chain = work.chain
        if work.outcome != "done" or chain is None:
            return
        pipeline.telemetry.observe_chain(chain)  # the span; its metrics are counted with the event's
        if pipeline.settings.env == "development":
            write_snapshot(
                pipeline.settings.tracing_dir,
                chain.source,
                chain.projection(),
                chain.events(),
                chain.trace.started_at_ms,
            )


DEFAULT_STEPS: Sequence[Step] = (Begin(), Interpret(), Project(), CommitStep(), AfterCommit())
