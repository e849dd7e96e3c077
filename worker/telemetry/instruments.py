"""The names telemetry publishes under: the meter, tracer and instrument names, and the attribute builders.

``INSTRUMENT_ATTRS`` is the table of LobeHub's 15 instruments (the :class:`worker.telemetry.recorder.Telemetry`
attribute that holds each one → its metric name; the Grafana dashboard test reads the names from it) and
``INSTRUMENT_DESCRIPTIONS`` their descriptions, word for word LobeHub's (packages/observability-otel/src/modules/
agent-signal/index.ts), which ``/metrics`` prints as HELP lines. :class:`DescribedInstruments` creates an
instrument on a given meter with its description. :func:`agent_signal_attrs` builds the ``agent.signal.*``
attribute set every series carries, None dropped, and :func:`signal_type_attrs` the attributes of a signal-type
series. Nothing here creates meters or tracers.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.metrics import Counter, Histogram, Meter

from worker.documents.projection import signal_domain, signal_outcome

AttrsKey = tuple[tuple[str, Any], ...]  # a series' attributes, sorted and frozen

__all__ = [
    "INSTRUMENT_ATTRS",
    "INSTRUMENT_DESCRIPTIONS",
    "METER_NAME",
    "TRACER_NAME",
    "TRACER_VERSION",
    "AttrsKey",
    "DescribedInstruments",
    "agent_signal_attrs",
    "signal_type_attrs",
]

METER_NAME = "server-services-agent-signal"
TRACER_NAME = "agent-signal"
TRACER_VERSION = "0.0.1"

INSTRUMENT_ATTRS = {
    "source_counter": "agent_signal_source_occurrences_total",
    "signal_counter": "agent_signal_signal_occurrences_total",
    "action_counter": "agent_signal_action_occurrences_total",
    "action_result_counter": "agent_signal_action_results_total",
    "chain_counter": "agent_signal_chains_total",
    "transition_counter": "agent_signal_signal_action_transitions_total",
    "chain_duration": "agent_signal_chain_duration_ms",
    "action_duration": "agent_signal_action_duration_ms",
    "source_event_counter": "agent_signal_source_events_total",
    "source_event_duration": "agent_signal_source_event_duration_ms",
    "workflow_run_counter": "agent_signal_workflow_runs_total",
    "workflow_run_duration": "agent_signal_workflow_duration_ms",
    "handler_counter": "agent_signal_handler_runs_total",
    "handler_duration": "agent_signal_handler_duration_ms",
    "terminal_counter": "agent_signal_terminal_results_total",
}

INSTRUMENT_DESCRIPTIONS = {
    "agent_signal_source_occurrences_total": "Count of AgentSignal source events persisted to telemetry.",
    "agent_signal_signal_occurrences_total": "Count of AgentSignal signal occurrences persisted to telemetry.",
    "agent_signal_action_occurrences_total": "Count of AgentSignal action occurrences persisted to telemetry.",
    "agent_signal_action_results_total": "Count of AgentSignal action results persisted to telemetry.",
    "agent_signal_chains_total": "Count of projected AgentSignal chains persisted to telemetry.",
    "agent_signal_signal_action_transitions_total": (
        "Count of AgentSignal signal to action transitions persisted to telemetry."
    ),
    "agent_signal_chain_duration_ms": "Observed duration for one AgentSignal chain summary.",
    "agent_signal_action_duration_ms": "Observed duration for one AgentSignal action attempt.",
    "agent_signal_source_events_total": (
        "Count of AgentSignal source-event generation attempts grouped by outcome."
    ),
    "agent_signal_source_event_duration_ms": (
        "Observed duration for one AgentSignal source-event generation attempt."
    ),
    "agent_signal_workflow_runs_total": "Count of AgentSignal workflow runs grouped by outcome.",
    "agent_signal_workflow_duration_ms": "Observed duration for one AgentSignal workflow run.",
    "agent_signal_handler_runs_total": (
        "Count of AgentSignal scheduler handler invocations grouped by outcome."
    ),
    "agent_signal_handler_duration_ms": (
        "Observed duration for one AgentSignal scheduler handler invocation."
    ),
    "agent_signal_terminal_results_total": (
        "Count of AgentSignal terminal runtime results grouped by status and reason."
    ),
}


class DescribedInstruments:
    """Creates the named instruments on ``meter``, each with its ``INSTRUMENT_DESCRIPTIONS`` entry."""

    def __init__(self, meter: Meter) -> None:
        self._meter = meter

    def counter(self, name: str, *, unit: str) -> Counter:
        return self._meter.create_counter(name, unit=unit, description=INSTRUMENT_DESCRIPTIONS[name])

    def histogram(self, name: str, *, unit: str) -> Histogram:
        return self._meter.create_histogram(name, unit=unit, description=INSTRUMENT_DESCRIPTIONS[name])


def agent_signal_attrs(**attrs: Any) -> dict[str, Any]:
    """``agent.signal.<name>`` attributes, None dropped."""
    return {f"agent.signal.{k}": v for k, v in attrs.items() if v is not None}


def signal_type_attrs(signal_type: str, source_type: str | None) -> dict[str, Any]:
    """The attributes of a signal-type series: its domain, outcome and type (and the source type if given)."""
    return agent_signal_attrs(
        signal_domain=signal_domain(signal_type),
        signal_outcome=signal_outcome(signal_type),
        signal_type=signal_type,
        source_type=source_type,
    )
