"""A finished chain's metrics are counted from its nodes (worker/telemetry/recorder.py ``event_committed``) and its
projection is built only when read (worker/chain/chain_document.py ``ChainRun``). Counting from the nodes must give
what the projection states: for chains of every outcome, each counted series and value is checked against the
projection's envelope and record."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from tests.unit.worker.documents.test_chain_storage import CASES, _action, _result, _signal, _source
from worker.chain.chain_document import ChainRun
from worker.chain.scheduler import ChainTrace
from worker.core.nodes import ExecutorResult
from worker.documents.projection import project_chain
from worker.settings import Settings
from worker.telemetry.chain_metrics import ChainShape, OneActionKey, chain_shape, one_action_key
from worker.telemetry.recorder import Telemetry, configure_telemetry


def _points(
    telemetry: Telemetry, reader: InMemoryMetricReader
) -> dict[str, list[tuple[dict[str, Any], Any]]]:
    telemetry.flush_measurements()
    data = reader.get_metrics_data()
    out: dict[str, list[tuple[dict[str, Any], Any]]] = {}
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                out.setdefault(metric.name, []).extend(
                    (dict(p.attributes or {}), p) for p in metric.data.data_points
                )
    return out


def _unfinished(result: ExecutorResult) -> ExecutorResult:
    return result.model_copy(update={"attempt": result.attempt.model_copy(update={"completed_at": None})})


def _orphan(i: int) -> ExecutorResult:
    """A result whose action is not in the chain: counted nowhere (its action is unknown)."""
    return _result(i, "applied").model_copy(update={"action_id": f"elsewhere:action:{i}"})


# Shapes where the final status, the filter on unknown actions and the duration samples can go wrong: the last
# action has no result while earlier ones do; a result of an unknown action; a result that never completed;
# two results of one action (the first is the action's result, as in the projection).
SHAPES: dict[str, tuple[int, list[ExecutorResult]]] = {
    **{case: (CASES[case][1], [_result(i, s) for i, s in enumerate(CASES[case][2])]) for case in CASES},
    "last action without a result": (3, [_result(0, "applied"), _result(1, "failed")]),
    "a result of an unknown action": (2, [_result(0, "skipped"), _orphan(7), _result(1, "applied")]),
    "a result that never completed": (2, [_result(0, "applied"), _unfinished(_result(1, "failed"))]),
    "one action, a result of another": (1, [_orphan(7)]),
    "two results of the last action": (
        2,
        [_result(0, "applied"), _result(1, "failed"), _result(1, "applied")],
    ),
}


def _chain(case: str) -> ChainRun:
    n, results = SHAPES[case]
    payload, duration_ms = (CASES[case][0], CASES[case][3]) if case in CASES else ({"message": "m"}, 2.5)
    trace = ChainTrace(
        source=_source(payload),
        signals=[_signal(i) for i in range(max(n, 1))],
        actions=[_action(i) for i in range(n)],
        results=results,
        duration_ms=round(duration_ms or 0.0, 3),  # as the scheduler measures it: the record's precision
    )
    return ChainRun(trace, trace.source, attempt=1)


def _shape_named(key: OneActionKey) -> ChainShape:
    """The shape a one-action key names."""
    source_type, first, second, action_type, action_signal, status = key
    return (source_type, (first, second), ((action_type, action_signal),), ((action_type, status),), status)


@pytest.mark.parametrize("case", sorted(SHAPES))
def test_the_one_action_shape_is_the_general_one(case: str) -> None:
    """The flat key of a chain of one action, its result and two signals names what the general shape holds
    (and no other chain has one)."""
    chain = _chain(case)
    key = one_action_key(chain)
    shape, known = chain_shape(chain)
    if key is None:
        assert (len(chain.actions), len(chain.results), len(chain.signals)) != (1, 1, 2) or not known
    else:
        assert _shape_named(key) == shape and known == chain.results


@pytest.mark.parametrize("signals", [0, 1, 2, 3])
def test_the_one_action_shape_with_any_count_of_signals(signals: int) -> None:
    """The plain path reads two signals (the action's and its result's: most chains) apart from any other count."""
    trace = ChainTrace(
        source=_source({"message": "m"}),
        signals=[_signal(i) for i in range(signals)],
        actions=[_action(0)],
        results=[_result(0, "applied")],
        duration_ms=1.0,
    )
    chain = ChainRun(trace, trace.source, attempt=1)
    shape, results = chain_shape(chain)
    key = one_action_key(chain)
    assert (key is not None) == (signals == 2)
    assert key is None or (_shape_named(key), chain.results) == (shape, results)
    assert len(shape[1]) == signals


def _telemetry(reader: InMemoryMetricReader, monkeypatch: pytest.MonkeyPatch) -> Telemetry:
    """Metrics only, whatever the developer's environment says (no OTLP endpoint, no trace file: no spans)."""
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    telemetry = configure_telemetry(Settings(trace_file=None), service_name="test", metric_readers=[reader])
    assert not telemetry.tracing
    return telemetry


@pytest.mark.parametrize("case", sorted(SHAPES))
def test_counting_from_the_nodes_states_what_the_projection_says(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    reader = InMemoryMetricReader()
    telemetry = _telemetry(reader, monkeypatch)
    chain = _chain(case)
    telemetry.event_committed(
        tenant="t",
        source_type=chain.source.source_type,
        workflow_status="generated",
        outcome="done",
        duration_ms=1.0,
        latency_ms=None,
        chain=chain,
    )
    assert chain._projection is None  # counting never projected it
    points = _points(telemetry, reader)
    telemetry.shutdown()

    projection = project_chain(
        chain.source, chain.signals, chain.actions, chain.results, duration_ms=chain.duration_ms
    )
    envelope, record = projection["envelope"], projection["record"]
    final_status = record.get("finalStatus", "none")

    ((chain_attrs, chains),) = points["agent_signal_chains_total"]
    assert chain_attrs["agent.signal.final_status"] == final_status and chains.value == 1
    ((_, duration),) = points["agent_signal_chain_duration_ms"]
    assert duration.count == 1 and duration.sum == pytest.approx(record["durationMs"])

    actions = {a["actionId"]: a for a in envelope["actions"]}
    known = [r for r in envelope["results"] if r["actionId"] in actions]  # of an action of this chain
    expected_results = Counter((actions[r["actionId"]]["actionType"], r["status"]) for r in known)
    counted = Counter(
        {
            (a["agent.signal.action_type"], a["agent.signal.result_status"]): p.value
            for a, p in points.get("agent_signal_action_results_total", [])
        }
    )
    assert counted == expected_results
    durations = sum(
        r["attempt"]["completedAt"] - r["attempt"]["startedAt"]
        for r in known
        if r["attempt"].get("completedAt") is not None
    )
    assert sum(p.sum for _, p in points.get("agent_signal_action_duration_ms", [])) == durations
    signals = Counter(s["signalType"] for s in envelope["signals"])
    assert (
        Counter(
            {
                a["agent.signal.signal_type"]: p.value
                for a, p in points["agent_signal_signal_occurrences_total"]
            }
        )
        == signals
    )


def test_the_projection_is_built_once_and_only_when_read() -> None:
    chain = _chain("failed and skipped")
    chain.stored_json()
    assert chain._projection is None  # storing never projected it (nor counting: the test above)
    first = chain.projection()
    assert chain.projection() is first
    assert first["record"]["summary"]["totalActions"] == 3
