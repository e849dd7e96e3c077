"""One event's measurements as one plan: every series an event of one shape counts and observes, built once.

A worker records a committed event's metrics in one call (``Telemetry.event_committed``): its walk's handler
runs, its chain's series (worker/telemetry/chain_metrics.py), its workflow run, the engine's count and the
latency; the handler runs of a walk that nothing commits (a lost lease, a store error, a re-run) in another
(``Telemetry.handler_runs``). They depend on a
handful of strings only (an :data:`EventKey`: tenant, source type, statuses, the chain's shape; or the walk's
:data:`RunIds`), so the recorder looks up the :class:`EventPlan` for that key and buffers the plan with the
values (durations, in the plan's order); the buffer expands plans into series when it flushes, a second's
events at a time. The hot path makes no attribute tuples and takes one lock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from worker.telemetry.chain_metrics import ChainShape, chain_series
from worker.telemetry.instruments import AttrsKey
from worker.telemetry.instruments import agent_signal_attrs as _a

__all__ = ["EventKey", "EventPlan", "HandlerRuns", "RunIds", "SeriesId", "event_plan", "runs_plan"]

# (handler id, handler kind, node type, handler status) of one handler run
RunId = tuple[str, str, str, str]
RunIds = tuple[RunId, ...]  # one walk's handler runs, in order: the key of its plan
# (tenant, source type, workflow status, engine status, has latency, chain shape or None, its walk's handler
# runs: () when they were counted on their own)
EventKey = tuple[str, str, str, str, bool, ChainShape | None, RunIds]


@dataclass(slots=True)
class HandlerRuns:
    """The handler runs of one walk of an event's chain, in order: what ran (``ids``) and how long (``ms``).
    Kept on the chain's scope, so a chain that raised still reports the runs before the error."""

    ids: list[RunId] = field(default_factory=list)
    ms: list[float] = field(default_factory=list)

    def add(self, run: RunId, duration_ms: float) -> None:
        self.ids.append(run)
        self.ms.append(duration_ms)


SeriesId = tuple[str, AttrsKey]  # (instrument, frozen attributes): one series


@dataclass(frozen=True, slots=True, eq=False)
class EventPlan:
    """(Hashed by identity: the buffer keys its rows by plan.) What one event of a shape records: ``counted`` once each (a series may repeat), and one value for each
    of ``observed`` (handler durations, action durations, the chain's, the workflow's, the latency: the order
    of :meth:`worker.telemetry.recorder.Telemetry.event_committed`'s values)."""

    counted: tuple[SeriesId, ...]
    observed: tuple[SeriesId, ...]


def _frozen(attrs: Mapping[str, Any]) -> AttrsKey:
    return tuple(sorted(attrs.items()))


def runs_plan(runs: RunIds) -> EventPlan:
    """The plan of a walk whose handler runs are ``runs``: one count and one duration per run."""
    counted: list[SeriesId] = []
    observed: list[SeriesId] = []
    for handler_id, kind, node_type, handler_status in runs:
        attrs = _frozen(
            _a(handler_id=handler_id, handler_kind=kind, node_type=node_type, handler_status=handler_status)
        )
        counted.append(("agent_signal_handler_runs_total", attrs))
        observed.append(("agent_signal_handler_duration_ms", attrs))
    return EventPlan(tuple(counted), tuple(observed))


def event_plan(key: EventKey) -> EventPlan:
    """The plan of committed events with ``key``: their handler runs first, then what the event counts."""
    tenant, source_type, workflow_status, status, has_latency, shape, runs = key
    counted: list[SeriesId] = []
    observed: list[SeriesId] = []
    if runs:
        walk = runs_plan(runs)
        counted += walk.counted
        observed += walk.observed
    if shape is not None:
        chain_counted, result_keys, chain_key = chain_series(shape)
        counted += chain_counted
        observed += [("agent_signal_action_duration_ms", attrs) for attrs in result_keys]
        observed.append(("agent_signal_chain_duration_ms", chain_key))
    workflow = _frozen({**_a(source_type=source_type, workflow_status=workflow_status), "tenant": tenant})
    counted.append(("agent_signal_workflow_runs_total", workflow))
    observed.append(("agent_signal_workflow_duration_ms", workflow))
    counted.append(("agent_signal_events_total", _frozen({"tenant": tenant, "status": status})))
    if has_latency:
        observed.append(("agent_signal_event_latency_ms", _frozen({"tenant": tenant})))
    return EventPlan(tuple(counted), tuple(observed))
