"""Draining a scope: the lease, the per-event stages in their one explicit order, and failure handling.

``Pipeline.drain(scopeKey)`` takes the scope lease, then for each event at the head of the scope's inbox:

    begin      (fenced script) head event → processing, attempts += 1; a head whose previous attempt
               died with its worker and that has used all attempts goes straight to the dead letters
    stages     DEFAULT_STAGES, in list order: interpret (source → signals → actions → results, see
               worker.scheduler) then project (the chain's trace, stored with the commit)
    commit     (fenced script) done | retry (back to queued with notBefore) | dead (to the DLQ)

and finally releases the lease with the token-checked script that refuses to release while the inbox is
non-empty, so an event appended during release is drained by us, never stranded. A head waiting for its
retry time, or a drain that hit ``max_events_per_drain``, hands the scope off: the lease is released and
the caller publishes the next drain task (with the retry countdown), keeping other scopes moving.

This is the only module that decides stage order. Stages are small callables on :class:`EventWork`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from policies.lease import LeaseGrant, ScopeLease
from policies.retry import backoff_ms, should_retry
from worker.errors import LeaseLost, PermanentFailure, RetryLater, SkipEvent
from worker.logs import bind_event, clear_context
from worker.nodes import Source
from worker.projection import project_chain, trace_events
from worker.registry import Registry
from worker.scheduler import ChainTrace, run_chain
from worker.settings import Settings
from worker.snapshots import write_snapshot
from worker.store import Begun, EventStore, Head, RedisActionPort, now_ms
from worker.telemetry import DISABLED, Telemetry

__all__ = ["DEFAULT_STAGES", "DrainOutcome", "EventWork", "Interpret", "Pipeline", "Project", "Stage"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class EventWork:
    """What the stages of one event share."""

    source: Source
    begun: Begun
    grant: LeaseGrant
    port: RedisActionPort
    max_attempts: int
    services: Mapping[str, Any]
    telemetry: Telemetry = DISABLED
    trace: ChainTrace | None = None
    projection: dict[str, Any] | None = None
    chain_json: str = ""
    extras: dict[str, Any] = field(default_factory=dict)


class Stage(Protocol):
    """One step of an event's processing. May raise the control-flow exceptions of worker.errors."""

    name: str

    def __call__(self, work: EventWork, registry: Registry) -> None: ...


class Interpret:
    """Run the chain: source handlers, breadth-first signals and actions, idempotent executors."""

    name = "interpret"

    def __call__(self, work: EventWork, registry: Registry) -> None:
        work.trace = run_chain(
            work.source,
            registry,
            work.port,
            attempt=work.begun.attempts,
            max_attempts=work.max_attempts,
            services=work.services,
            telemetry=work.telemetry,
        )


class Project:
    """Project the chain (LobeHub's envelope + record); the commit stores it with the event's final state."""

    name = "project"

    def __call__(self, work: EventWork, registry: Registry) -> None:
        if work.trace is not None:
            work.projection = chain_projection(work.trace, work.source, attempt=work.begun.attempts)
            work.chain_json = json.dumps(work.projection, separators=(",", ":"), ensure_ascii=False)


DEFAULT_STAGES: Sequence[Stage] = (Interpret(), Project())


def chain_projection(
    trace: ChainTrace, source: Source, *, attempt: int, error: str | None = None
) -> dict[str, Any]:
    """The stored chain document: ``{"envelope", "record"}``; our extras sit in ``envelope.metadata``."""
    trace_id, _ = Telemetry.current_ids()
    metadata: dict[str, Any] = {"eventId": source.event_id, "attempt": attempt, "status": trace.status}
    if trace.terminal is not None:
        metadata["terminal"] = trace.terminal.to_json_dict()
    if error is not None:
        metadata["error"] = error
    return project_chain(
        source,
        trace.signals,
        trace.actions,
        trace.results,
        duration_ms=trace.duration_ms,
        trace_id=trace_id,
        metadata=metadata,
    )


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
        stages: Sequence[Stage] = DEFAULT_STAGES,
        services: Mapping[str, Any] | None = None,
        telemetry: Telemetry = DISABLED,
    ) -> None:
        self.telemetry = telemetry
        self._last_status = "error"  # the workflow status of the event being processed (one at a time)
        self.store = store
        self.registry = registry
        self.settings = settings
        self.stages = tuple(stages)
        self.services = dict(services or {})
        self.services.setdefault("redis", store.client)
        self.services.setdefault("settings", settings)
        self.lease = ScopeLease(
            store.scripts,
            store.keys,
            ttl_s=settings.lease_ttl_s,
            renew_interval_s=settings.lease_renew_interval_s,
        )

    def drain(self, scope_key: str) -> DrainOutcome:
        grant, remaining_ms, head = self.lease.acquire(
            scope_key, prefix=self.settings.key_prefix, now_ms=now_ms()
        )
        if grant is None or head is None:
            # Somebody holds the scope. A live holder drains what we were sent for; a dead one's lease
            # runs out in remaining_ms, so look again then (no spinning, one message per TTL).
            return DrainOutcome(0, "busy", delay_s=remaining_ms / 1000 + 0.05)
        try:
            with self.telemetry.span(
                "agent_signal.scope.drain",
                {"agent.signal.scope_key": scope_key, "agent.signal.fence": grant.fence},
            ) as span:
                outcome = self._drain_with(grant, head)
                if span is not None:
                    span.set_attribute("agent.signal.processed", outcome.processed)
                    span.set_attribute("agent.signal.drain_next", outcome.next)
                return outcome
        finally:
            self.lease.stop_renewing()

    def _drain_with(self, grant: LeaseGrant, head: Head) -> DrainOutcome:
        processed = 0
        while True:
            if head.code == 0:
                return DrainOutcome(processed, "idle")  # the script released the scope
            if head.code == 3 or head.begun is None:
                wait_ms = max(head.not_before_ms - now_ms(), 0)
                if not self.lease.hand_off(grant):
                    return DrainOutcome(processed, "lost")
                return DrainOutcome(processed, "again", delay_s=wait_ms / 1000)
            go_on = processed + 1 < self.settings.max_events_per_drain
            committed, following = self._process(grant, head.begun, go_on=go_on)
            if not committed:
                return DrainOutcome(processed, "lost")
            processed += 1
            if following is None:
                # max_events_per_drain reached: hand the scope to a fresh task so other scopes get a turn.
                if not self.lease.hand_off(grant):
                    return DrainOutcome(processed, "lost")
                return DrainOutcome(processed, "again")
            head = following

    def _process(self, grant: LeaseGrant, begun: Begun, *, go_on: bool) -> tuple[bool, Head | None]:
        """Run one event to a committed outcome; (False, None) when the lease was lost (nothing committed).

        With ``go_on`` the commit also takes the next head (returned) or releases the idle scope. The event
        runs inside an ``agent_signal.workflow.run`` span that continues the trace of its enqueue."""
        started = time.perf_counter()
        source_type, traceparent = "unknown", None
        try:
            peek = json.loads(begun.body)
            source_type, traceparent = str(peek.get("sourceType", "unknown")), peek.get("traceparent")
        except ValueError:
            pass
        bind_event(eventId=begun.event_id, scopeKey=grant.scope_key, attempt=begun.attempts)
        attrs = {
            "agent.signal.scope_key": grant.scope_key,
            "agent.signal.event_id": begun.event_id,
            "agent.signal.attempt": begun.attempts,
        }
        try:
            with self.telemetry.span(
                "agent_signal.workflow.run", attrs, parent=self.telemetry.extract(traceparent)
            ):
                committed, following, status = self._process_event(grant, begun, go_on=go_on)
        finally:
            clear_context("eventId", "scopeKey", "attempt", "chainId", "sourceId")
        if committed:
            self.telemetry.workflow_run(
                status=status, source_type=source_type, duration_ms=(time.perf_counter() - started) * 1000
            )
        return committed, following

    def _process_event(
        self, grant: LeaseGrant, begun: Begun, *, go_on: bool
    ) -> tuple[bool, Head | None, str]:
        """(committed, next head, workflow status: generated | error | invalid_payload)."""
        committed, following = self._run_event(grant, begun, go_on=go_on)
        return committed, following, self._last_status

    def _run_event(self, grant: LeaseGrant, begun: Begun, *, go_on: bool) -> tuple[bool, Head | None]:
        self._last_status = "error"
        max_attempts = self.settings.max_attempts
        try:
            source = Source.model_validate_json(begun.body)
        except ValueError as exc:
            self._last_status = "invalid_payload"
            return self._commit(grant, begun, "dead", go_on=go_on, error=f"stored event is unreadable: {exc}")
        bind_event(chainId=source.chain.chain_id, sourceId=source.source_id)
        if begun.attempts > max_attempts:
            previous = f" (last error: {begun.last_error})" if begun.last_error else ""
            return self._commit(
                grant,
                begun,
                "dead",
                go_on=go_on,
                error=f"worker lost while processing; {begun.attempts - 1} deliveries used of {max_attempts}{previous}",
                source=source,
            )
        port = RedisActionPort(self.store, grant.scope_key, grant.fence, grant.lost)
        work = EventWork(source, begun, grant, port, max_attempts, self.services, telemetry=self.telemetry)
        try:
            for stage in self.stages:
                stage(work, self.registry)
        except LeaseLost:
            log.warning("lease lost mid-event; not committing", extra={"eventId": begun.event_id})
            return False, None
        except SkipEvent:
            return self._commit(grant, begun, "done", go_on=go_on, source=source, chain_json=work.chain_json)
        except PermanentFailure as exc:
            return self._fail(grant, begun, work, source, f"{exc.code}: {exc}", go_on=go_on, permanent=True)
        except RetryLater as exc:
            return self._fail(
                grant, begun, work, source, f"RetryLater: {exc}", go_on=go_on, min_delay_s=exc.delay_s
            )
        except Exception as exc:
            return self._fail(grant, begun, work, source, f"{type(exc).__name__}: {exc}", go_on=go_on)
        committed, following = self._commit(
            grant, begun, "done", go_on=go_on, source=source, chain_json=work.chain_json
        )
        if committed:
            self._last_status = "generated"
            self._after_commit(work)
        return committed, following

    def _after_commit(self, work: EventWork) -> None:
        """Metrics and the observe span only for committed chains (a rejected commit reports nothing)."""
        if work.projection is None or work.trace is None:
            return
        trace = work.trace

        def events() -> list[dict[str, Any]]:
            return trace_events(work.source, trace.signals, trace.actions, trace.results)

        self.telemetry.persist_projection(work.projection, events)
        if self.settings.env == "development":
            write_snapshot(
                self.settings.tracing_dir, work.source, work.projection, events(), trace.started_at_ms
            )

    def _fail(
        self,
        grant: LeaseGrant,
        begun: Begun,
        work: EventWork,
        source: Source,
        error: str,
        *,
        go_on: bool,
        permanent: bool = False,
        min_delay_s: float = 0.0,
    ) -> tuple[bool, Head | None]:
        chain_json = ""
        if work.trace is not None:
            projection = chain_projection(work.trace, source, attempt=begun.attempts, error=error)
            chain_json = json.dumps(projection, separators=(",", ":"), ensure_ascii=False)
        if permanent or not should_retry(begun.attempts, self.settings.max_attempts):
            return self._commit(
                grant, begun, "dead", go_on=go_on, error=error, source=source, chain_json=chain_json
            )
        delay = backoff_ms(
            begun.attempts, base_ms=self.settings.retry_base_ms, cap_ms=self.settings.retry_cap_ms
        )
        delay = max(delay, int(min_delay_s * 1000))
        return self._commit(
            grant,
            begun,
            "retry",
            go_on=go_on,
            error=error,
            not_before_ms=now_ms() + delay,
            source=source,
            chain_json=chain_json,
        )

    def _commit(
        self,
        grant: LeaseGrant,
        begun: Begun,
        outcome: Literal["done", "dead", "retry"],
        *,
        go_on: bool,
        error: str = "",
        not_before_ms: int = 0,
        source: Source | None = None,
        chain_json: str = "",
    ) -> tuple[bool, Head | None]:
        reply, following = self.store.commit(
            grant.scope_key,
            grant.fence,
            begun.event_id,
            outcome,
            token=grant.token,
            go_on=go_on,
            error=error,
            not_before_ms=not_before_ms,
            chain_id=source.chain.chain_id if source is not None else "",
            chain_json=chain_json,
        )
        if reply == -1:
            log.warning(
                "fenced commit rejected (stale lease)",
                extra={"eventId": begun.event_id, "fence": grant.fence},
            )
            grant.lost.set()
            return False, None
        if reply == -2:
            log.error("commit found another event at the inbox head", extra={"eventId": begun.event_id})
            return False, None
        return True, following


def wait_until(predicate: Any, timeout_s: float, interval_s: float = 0.05) -> bool:
    """Poll ``predicate`` until true or timeout (used by the CLI and tests)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return bool(predicate())
