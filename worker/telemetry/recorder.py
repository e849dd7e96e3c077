"""The one module that owns telemetry: LobeHub's meter and 15 instruments, the tracer and its spans.

Nobody else creates meters or tracers (its helpers: instrument names and attribute builders in
worker/telemetry/instruments.py, the measurement buffer in worker/telemetry/buffer.py, the JSON-lines span
exporter in worker/telemetry/jsonl.py; import them from here). ``configure_telemetry`` is called in Celery's ``worker_process_init``
(each prefork child) and at the web app's startup, never at import; with ``AGENT_SIGNAL_TELEMETRY_ENABLED=false``
it returns :data:`DISABLED`, whose methods return at once (no cost).

Exporters: metrics go to this process's Prometheus instruments (worker/telemetry/process_metrics.py: the web app's
``/metrics``, a worker's own metrics port); OTLP (traces and metrics) when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set;
finished spans as JSON lines to ``AGENT_SIGNAL_TRACE_FILE`` when set (handy in development and used by the
end-to-end trace test). No OpenTelemetry meter is built unless something reads it (OTLP or a test's reader).
Trace context crosses the queue as a W3C ``traceparent`` stored on each event (one drain task serves many
events, so the Celery message's own context is not per event).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter, Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from worker.core.nodes import ExecutorResult
from worker.documents.projection import flatten_attributes
from worker.telemetry.buffer import MeasurementBuffer, PlanValues
from worker.telemetry.chain_metrics import (
    ChainShape,
    FinishedChain,
    OneActionKey,
    chain_shape,
    one_action_key,
)
from worker.telemetry.instruments import INSTRUMENT_ATTRS as _INSTRUMENT_ATTRS
from worker.telemetry.instruments import METER_NAME, TRACER_NAME, TRACER_VERSION, DescribedInstruments
from worker.telemetry.instruments import agent_signal_attrs as _a
from worker.telemetry.jsonl import JsonlSpanExporter
from worker.telemetry.log_privacy import describe_error, traceback_without_messages
from worker.telemetry.plan import EventPlan, HandlerRuns, RunIds, event_plan, runs_plan
from worker.telemetry.process_metrics import (
    BUCKETS_MS,
    ORIGIN_DOOR,
    ORIGIN_FOLLOW_UP,
    ProcessMetrics,
    process_metrics,
)

__all__ = ["DISABLED", "Telemetry", "configure_telemetry", "record_error"]

_PROPAGATOR = TraceContextTextMapPropagator()
PLANS_MAX = 10_000  # event plans kept built (each holds a tuple the size of its chain)


def record_error(span: Span, exc: BaseException) -> None:
    """Mark ``span`` ERROR with ``exc`` as log lines show it: its type and frames, its message only for the
    infrastructure's errors (worker/telemetry/log_privacy.py); OpenTelemetry's ``record_exception`` would export
    the message, which may quote what a user sent."""
    described = describe_error(exc)
    span.add_event(
        "exception",
        {
            "exception.type": type(exc).__name__,
            "exception.message": described,
            "exception.stacktrace": traceback_without_messages(exc),
        },
    )
    span.set_status(Status(StatusCode.ERROR, described))


class Telemetry(MeasurementBuffer):
    """Instruments and spans. A disabled instance (``Telemetry(None, None)``) does nothing.

    Measurements go to ``metrics`` (this process's Prometheus instruments) and, when a meter provider is given
    (OTLP, a test's reader), to LobeHub's OpenTelemetry instruments as well."""

    def __init__(
        self,
        tracer_provider: TracerProvider | None,
        meter_provider: MeterProvider | None,
        *,
        tracing: bool = True,
        metrics: ProcessMetrics | None = None,
    ) -> None:
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self.enabled = tracer_provider is not None and (meter_provider is not None or metrics is not None)
        # Spans are only made when something consumes them (an exporter or a test processor): a span
        # nobody reads costs more than the work it describes.
        self.tracing = self.enabled and tracing
        super().__init__()
        self._sink = metrics
        # LobeHub adds attributesCommon() (service name + environment) to some series; ours live on the
        # Resource (service.name, deployment.environment), which every exporter attaches anyway.
        # Read-only and empty: an event plan (worker/telemetry/plan.py) is built once and never sees a change.
        self.common: Mapping[str, Any] = MappingProxyType({})
        # Event plans by key (event_committed); bounded: cleared when full.
        # an event's plan by its EventKey, the shape of a one-action chain as its flat OneActionKey
        self._plans: dict[
            tuple[str, str, str, str, bool, ChainShape | OneActionKey | None, RunIds], EventPlan
        ] = {}
        self._run_plans: dict[RunIds, EventPlan] = {}
        if not self.enabled:
            return
        self.reset_in_forked_children()
        assert tracer_provider is not None
        self.tracer = tracer_provider.get_tracer(TRACER_NAME, TRACER_VERSION)
        if meter_provider is None:
            return
        meter = meter_provider.get_meter(METER_NAME)
        described = DescribedInstruments(meter)  # LobeHub's descriptions, the HELP lines of /metrics
        c, h = described.counter, described.histogram
        self.source_counter = c("agent_signal_source_occurrences_total", unit="{source}")
        self.signal_counter = c("agent_signal_signal_occurrences_total", unit="{signal}")
        self.action_counter = c("agent_signal_action_occurrences_total", unit="{action}")
        self.action_result_counter = c("agent_signal_action_results_total", unit="{result}")
        self.chain_counter = c("agent_signal_chains_total", unit="{chain}")
        self.transition_counter = c("agent_signal_signal_action_transitions_total", unit="{transition}")
        self.chain_duration = h("agent_signal_chain_duration_ms", unit="ms")
        self.action_duration = h("agent_signal_action_duration_ms", unit="ms")
        self.source_event_counter = c("agent_signal_source_events_total", unit="{event}")
        self.source_event_duration = h("agent_signal_source_event_duration_ms", unit="ms")
        self.workflow_run_counter = c("agent_signal_workflow_runs_total", unit="{workflow-run}")
        self.workflow_run_duration = h("agent_signal_workflow_duration_ms", unit="ms")
        self.handler_counter = c("agent_signal_handler_runs_total", unit="{handler-run}")
        self.handler_duration = h("agent_signal_handler_duration_ms", unit="ms")
        self.terminal_counter = c("agent_signal_terminal_results_total", unit="{terminal-result}")
        self._instruments = {name: getattr(self, attr) for attr, name in _INSTRUMENT_ATTRS.items()}

    # ---- context propagation -----------------------------------------------------------------------

    def traceparent(self) -> str | None:
        """The current span's W3C traceparent, to store on an event."""
        if not self.tracing:
            return None
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier)
        return carrier.get("traceparent")

    @staticmethod
    def extract(traceparent: str | None) -> otel_context.Context | None:
        return _PROPAGATOR.extract({"traceparent": traceparent}) if traceparent else None

    # ---- spans -------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def span(
        self,
        name: str,
        attributes: Mapping[str, Any] | None = None,
        *,
        parent: otel_context.Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
    ) -> Iterator[Span | None]:
        """A span made current for the block; exceptions mark it ERROR and propagate. The exception is recorded
        as its type and frames, not OpenTelemetry's default of its message (a handler's error quotes what it
        could not parse, and a span leaves the process as a log line does: worker/telemetry/log_privacy.py)."""
        if not self.tracing:
            yield None
            return
        with self.tracer.start_as_current_span(
            name,
            context=parent,
            kind=kind,
            attributes=dict(attributes or {}),
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield span
            except BaseException as exc:
                record_error(span, exc)
                raise

    @staticmethod
    def current_ids() -> tuple[str | None, str | None]:
        ctx = trace.get_current_span().get_span_context()
        if not ctx.is_valid:
            return None, None
        return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"

    # ---- recorders -----------------------------------------------------------------------------------
    # Buffered (worker/telemetry/buffer.py): ``_add`` and ``_record`` queue, ``flush_measurements`` hands over.

    def source_event(
        self, *, status: str, source_type: str, duration_ms: float, tenant: str = "default"
    ) -> None:
        if not self.enabled:
            return
        self.source_events([(status, source_type)], duration_ms=duration_ms, tenant=tenant)

    def source_events(
        self, outcomes: Iterable[tuple[str, str]], *, duration_ms: float, tenant: str = "default"
    ) -> None:
        """An enqueue batch's events, as (status, source type) each, that took ``duration_ms`` together:
        counted per distinct pair (a batch is mostly one), not per event."""
        if not self.enabled:
            return
        for (status, source_type), count in Counter(outcomes).items():
            attrs = {
                **_a(source_event_status=status, source_type=source_type),
                **self.common,
                "tenant": tenant,
            }
            self._add("agent_signal_source_events_total", attrs, count)
            self._record_many("agent_signal_source_event_duration_ms", [duration_ms] * count, attrs)
            if status in ("accepted", "duplicate"):
                attrs = {"tenant": tenant, "status": status, "origin": ORIGIN_DOOR}
                self._add("agent_signal_events_total", attrs, count)

    def event_committed(
        self,
        *,
        tenant: str,
        source_type: str,
        workflow_status: str,
        outcome: str,
        duration_ms: float,
        latency_ms: float | None,
        chain: FinishedChain | None = None,
        runs: HandlerRuns | None = None,
    ) -> None:
        """Everything an event this worker committed counts, in one call: its walk's handler ``runs``, its
        chain's series when it is done (LobeHub's persistAgentSignalObservability metrics), its workflow run, the
        engine's count (``retry`` is counted as ``retried``) and, when done, its enqueue-to-done latency. One
        plan per shape of event (worker/telemetry/plan.py); the values follow the plan's ``observed`` order."""
        if not self.enabled:
            return
        status = "retried" if outcome == "retry" else outcome
        run_ids: RunIds = ()
        values: PlanValues = []
        if runs is not None and runs.ids:
            run_ids, values = tuple(runs.ids), list(runs.ms)
        shape: ChainShape | OneActionKey | None = None
        known: Sequence[ExecutorResult] = ()
        if chain is not None:
            shape = one_action_key(chain)  # most chains: their shape's strings as one flat tuple
            if shape is None:
                shape, known = chain_shape(chain)
            else:
                known = chain.results
        key = (tenant, source_type, workflow_status, status, latency_ms is not None, shape, run_ids)
        plan = self._plans.get(key)
        if plan is None:  # a flat key's plan is its chain's shape's
            shaped = (*key[:5], None if chain is None else chain_shape(chain)[0], run_ids)
            plan = _keep(self._plans, key, event_plan(shaped))
        for result in known:
            attempt = result.attempt
            done_at = attempt.completed_at
            values.append(None if done_at is None else done_at - attempt.started_at)
        if chain is not None:
            values.append(chain.duration_ms)  # rounded to the record's 3 decimals by the scheduler
        values.append(duration_ms)
        if latency_ms is not None:
            values.append(latency_ms)
        self._add_plan(plan, values)

    def handler_runs(self, runs: HandlerRuns) -> None:
        """The handler runs of one walk of an event's steps that no commit counted (a lost lease, a store
        error, a refused fence, a batch's speculation that is run again alone): a committed walk's runs are
        counted with its event (:meth:`event_committed`)."""
        if not self.enabled or not runs.ids:
            return
        key = tuple(runs.ids)
        plan = self._run_plans.get(key) or _keep(self._run_plans, key, runs_plan(key))
        self._add_plan(plan, list(runs.ms))

    def follow_ups(self, statuses: Iterable[str], tenant: str) -> None:
        """Events the service enqueued itself (``origin="follow_up"``): a chain's follow-ups its commit
        admitted and a plugin task's events (the reference agent's ``agent.execution.completed``); each
        ``accepted`` or ``duplicate``. Not the follow-ups journaled to another scope bucket: the outbox relay
        stores those later, in the worker's main process, which has no telemetry (docs/decisions.md, "Admitted
        events by origin")."""
        if not self.enabled:
            return
        for status, count in Counter(statuses).items():
            attrs = {"tenant": tenant, "status": status, "origin": ORIGIN_FOLLOW_UP}
            self._add("agent_signal_events_total", attrs, count)

    def fence_rejected(self, *, tenant: str) -> None:
        """A commit the fence refused (a stale lease)."""
        if self.enabled:
            self._add("agent_signal_fence_rejected_total", {"tenant": tenant})

    def rejected(self, count: int, *, tenant: str) -> None:
        """Events refused at the door as invalid (the engine's ``rejected`` count)."""
        if self.enabled and count:
            attrs = {"tenant": tenant, "status": "rejected", "origin": ORIGIN_DOOR}
            self._add("agent_signal_events_total", attrs, count)

    def cancelled_queued(self, *, tenant: str) -> None:
        """A queued event cancelled by an operator's call: it never reaches a worker, which counts the cancels
        that land while an event runs, so the process that made the call counts it (origin door)."""
        if self.enabled:
            self._add(
                "agent_signal_events_total", {"tenant": tenant, "status": "cancelled", "origin": ORIGIN_DOOR}
            )

    def terminal(self, *, node_kind: str, node_type: str, status: str, reason: str) -> None:
        if not self.enabled:
            return
        attrs = {
            **_a(node_kind=node_kind, node_type=node_type, terminal_reason=reason, terminal_status=status),
            **self.common,
        }
        self._add("agent_signal_terminal_results_total", attrs)

    def observe_chain(self, chain: FinishedChain) -> None:
        """LobeHub's persistAgentSignalObservability span: ``agent_signal.observe`` with the chain's events
        (the projection and the events built only when spans are read; its metrics are counted with the
        event's, by :meth:`event_committed`)."""
        if not self.tracing:
            return
        projection = chain.projection()
        self._observe_span(projection["envelope"]["source"], projection["record"], chain.events)

    def _observe_span(
        self,
        source: Mapping[str, Any],
        record: Mapping[str, Any],
        events: Callable[[], Sequence[Mapping[str, Any]]],
    ) -> None:
        """The ``agent_signal.observe`` span, with the chain's trace events as span events."""
        attrs = _a(
            chain_id=record["chainId"],
            final_action_type=record.get("finalActionType", "none"),
            final_status=record.get("finalStatus", "none"),
            scope_key=source["scopeKey"],
            source_id=source["sourceId"],
            source_type=source["sourceType"],
            agent_id=record.get("agentId"),
            operation_id=record.get("operationId"),
            topic_id=record.get("topicId"),
            total_signals=record["summary"]["totalSignals"],
            total_actions=record["summary"]["totalActions"],
            total_attempts=record["summary"]["attemptBreakdown"]["total"],
        )
        with self.tracer.start_as_current_span("agent_signal.observe", attributes=attrs) as span:
            for event in events():
                span.add_event(
                    event["type"],
                    flatten_attributes(event["attributes"]),
                    timestamp=int(event["timestamp"]) * 1_000_000,
                )

    def flush(self) -> None:
        self.flush_measurements()
        if self.enabled:
            assert self.tracer_provider is not None
            self.tracer_provider.force_flush()
            if self.meter_provider is not None:
                self.meter_provider.force_flush()

    def shutdown(self) -> None:
        if self.enabled:
            assert self.tracer_provider is not None
            self.tracer_provider.shutdown()
            if self.meter_provider is not None:
                self.meter_provider.shutdown()


DISABLED = Telemetry(None, None)


def _keep(plans: dict[Any, EventPlan], key: Any, plan: EventPlan) -> EventPlan:
    """Keep ``plan`` under ``key`` (bounded like the series: cleared when full)."""
    if len(plans) >= PLANS_MAX:
        plans.clear()
    plans[key] = plan
    return plan


def configure_telemetry(
    settings: Any,
    *,
    service_name: str,
    span_processors: Sequence[SpanProcessor] = (),
    metric_readers: Sequence[MetricReader] = (),
) -> Telemetry:
    """Build the providers for one process (see module docstring); DISABLED when telemetry is off."""
    if not getattr(settings, "telemetry_enabled", True):
        return DISABLED
    resource = Resource.create(
        {
            "service.name": service_name,
            "service.namespace": "agent-signal",
            "deployment.environment": getattr(settings, "env", "production"),
        }
    )
    otlp = bool(os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))
    tracing = bool(span_processors) or bool(getattr(settings, "trace_file", None)) or otlp
    tracer_provider = TracerProvider(resource=resource)
    for processor in span_processors:
        tracer_provider.add_span_processor(processor)
    if getattr(settings, "trace_file", None):
        tracer_provider.add_span_processor(SimpleSpanProcessor(JsonlSpanExporter(settings.trace_file)))
    readers = list(metric_readers)
    if otlp:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        readers.append(
            PeriodicExportingMetricReader(
                OTLPMetricExporter(), export_interval_millis=settings.metrics_export_interval_ms
            )
        )
    meter_provider = None
    if readers:
        # Exemplars would tie measurements to sampled spans; the per-measurement check is not worth its cost.
        meter_provider = MeterProvider(
            resource=resource,
            metric_readers=readers,
            exemplar_filter=AlwaysOffExemplarFilter(),
            # the Prometheus instruments' bounds (OpenTelemetry's defaults stop at 10 s)
            views=[
                View(
                    instrument_type=Histogram,
                    aggregation=ExplicitBucketHistogramAggregation(boundaries=BUCKETS_MS),
                )
            ],
        )
    telemetry = Telemetry(tracer_provider, meter_provider, tracing=tracing, metrics=process_metrics())
    telemetry.flush_every_s = min(1.0, settings.metrics_export_interval_ms / 1000)
    return telemetry


def now_ms() -> float:
    return time.perf_counter() * 1000
