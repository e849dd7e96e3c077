"""One call per committed event (worker/telemetry/plan.py): events of one shape share a plan, the buffer
expands plans at flush, and what reaches Prometheus equals recording every series of every event one by one."""

from __future__ import annotations

import os
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import generate_latest

from tests.support.prom import parse, total
from tests.unit.worker.chain.test_chain_run import _chain
from tests.unit.worker.documents.test_chain_storage import _action, _result, _signal, _source
from worker.chain.chain_document import ChainRun
from worker.chain.scheduler import ChainTrace
from worker.telemetry.chain_metrics import chain_shape
from worker.telemetry.instruments import INSTRUMENT_DESCRIPTIONS
from worker.telemetry.plan import HandlerRuns, event_plan
from worker.telemetry.process_metrics import ProcessMetrics
from worker.telemetry.recorder import Telemetry


def _telemetry() -> tuple[Telemetry, ProcessMetrics]:
    metrics = ProcessMetrics(INSTRUMENT_DESCRIPTIONS)
    return Telemetry(TracerProvider(), None, tracing=False, metrics=metrics), metrics


def _runs(*statuses: str) -> HandlerRuns:
    runs = HandlerRuns()
    for i, status in enumerate(statuses):
        runs.add((f"handler.{i}", "signal", "signal.message.received", status), 2.0 + i)
    return runs


def _commit(telemetry: Telemetry, chain: ChainRun | None, runs: HandlerRuns, **overrides: Any) -> None:
    """One walk's commit with its handler runs (as worker.drain.event.record does)."""
    values: dict[str, Any] = {
        "tenant": "a",
        "source_type": "agent.user.message",
        "workflow_status": "generated",
        "outcome": "done",
        "duration_ms": 10.0,
        "latency_ms": 4.0,
        "chain": chain,
        "runs": runs,
        **overrides,
    }
    telemetry.event_committed(**values)


def _scrape(telemetry: Telemetry, metrics: ProcessMetrics) -> Any:
    telemetry.flush_measurements()
    return parse(generate_latest(metrics.registry).decode())


def test_events_of_one_shape_share_a_plan_and_every_event_is_counted() -> None:
    telemetry, metrics = _telemetry()
    applied, unfinished = _chain("applied"), _chain("a result that never completed")
    for _ in range(5):
        _commit(telemetry, applied, _runs("ok", "ok"))
    for _ in range(2):
        _commit(telemetry, unfinished, _runs("ok", "error"), latency_ms=None, duration_ms=20.0)
    _commit(telemetry, None, _runs("error"), outcome="retry", workflow_status="error", latency_ms=None)
    # one plan per shape of event, its handler runs in it: none of handler runs alone
    assert (len(telemetry._plans), len(telemetry._run_plans)) == (3, 0)
    samples = _scrape(telemetry, metrics)
    assert total(samples, "agent_signal_chains_total") == 7
    assert total(samples, "agent_signal_workflow_runs_total") == 8
    assert total(samples, "agent_signal_workflow_duration_ms_sum") == 5 * 10 + 2 * 20 + 10
    assert total(samples, "agent_signal_events_total", status="done") == 7
    assert total(samples, "agent_signal_events_total", status="retried") == 1
    assert total(samples, "agent_signal_event_latency_ms_count") == 5
    assert total(samples, "agent_signal_handler_runs_total", agent_signal_handler_status="ok") == 12
    assert total(samples, "agent_signal_handler_runs_total", agent_signal_handler_status="error") == 3
    assert total(samples, "agent_signal_handler_duration_ms_sum") == 5 * (2 + 3) + 2 * (2 + 3) + 2
    # the chain that never completed one result observes one action duration per event, not two
    per_event = {"applied": len(applied.results), "unfinished": len(unfinished.results) - 1}
    assert (
        total(samples, "agent_signal_action_duration_ms_count")
        == 5 * per_event["applied"] + 2 * (per_event["unfinished"])
    )


def test_flushes_add_up_and_runs_without_a_commit_are_counted() -> None:
    """A walk that committed nothing (a lost lease, a refused fence, a store error) still counts its runs."""
    telemetry, metrics = _telemetry()
    _commit(telemetry, _chain("applied"), _runs("ok"))
    telemetry.flush_measurements()
    _commit(telemetry, _chain("applied"), _runs("ok"))
    telemetry.handler_runs(_runs("ok"))
    telemetry.fence_rejected(tenant="a")
    telemetry.handler_runs(HandlerRuns())  # a walk that ran no handler counts nothing
    samples = _scrape(telemetry, metrics)
    assert total(samples, "agent_signal_chains_total") == 2
    assert total(samples, "agent_signal_handler_runs_total") == 3
    assert total(samples, "agent_signal_fence_rejected_total", tenant="a") == 1
    assert total(samples, "agent_signal_workflow_runs_total") == 2


def test_a_forked_child_starts_with_an_empty_buffer() -> None:
    """The parent flushes what it recorded; a child must not count it again."""
    telemetry, _ = _telemetry()
    _commit(telemetry, _chain("applied"), _runs("ok"))
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child reports how many plans it holds rows for
        os.write(write, str(len(telemetry._plan_values)).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    assert os.read(read, 16) == b"0"
    assert len(telemetry._plan_values) == 1  # the parent keeps its event's plan (its handler runs in it)


def _one_action(status: str, signal_type: str, action: int = 0) -> ChainRun:
    """A chain of one action, its result and two signals (the case event_committed looks up by a flat key)."""
    trace = ChainTrace(
        source=_source({"message": "m"}),
        signals=[_signal(0, signal_type), _signal(1, f"signal.action.{status}")],
        actions=[_action(action)],
        results=[_result(action, status)],
        duration_ms=1.5,
    )
    return ChainRun(trace, trace.source, attempt=1)


def test_a_one_action_chain_s_flat_key_finds_the_plan_of_its_shape() -> None:
    """The flat key of a one-action chain names every string of its shape: chains that differ in any of them
    get their own plan, each the plan of its shape, and chains that do not share one."""
    telemetry, metrics = _telemetry()
    chains = [
        _one_action("applied", "signal.message.received"),
        _one_action("applied", "signal.message.received"),  # the same shape again: no new plan
        _one_action("failed", "signal.message.received"),
        _one_action("applied", "signal.other.received"),
        _one_action("applied", "signal.message.received", action=1),  # another action type
    ]
    for chain in chains:
        _commit(telemetry, chain, _runs("ok"))
    _commit(telemetry, chains[0], _runs("ok"), latency_ms=None)  # no latency: another plan
    assert len(telemetry._plans) == 5
    run_ids = tuple(_runs("ok").ids)
    expected = {
        (plan.counted, plan.observed)
        for plan in (
            event_plan(("a", "agent.user.message", "generated", "done", latency, chain_shape(c)[0], run_ids))
            for c, latency in [*((c, True) for c in chains), (chains[0], False)]
        )
    }
    assert {(plan.counted, plan.observed) for plan in telemetry._plans.values()} == expected
    samples = _scrape(telemetry, metrics)
    assert total(samples, "agent_signal_chains_total") == 6
    assert total(samples, "agent_signal_action_results_total", agent_signal_result_status="failed") == 1
    assert total(samples, "agent_signal_action_duration_ms_count") == 6
    # each value in its own series (all different: a swap in the flat path's order would show)
    assert total(samples, "agent_signal_action_duration_ms_sum") == 6 * 7  # completedAt - startedAt
    assert total(samples, "agent_signal_chain_duration_ms_sum") == 6 * 1.5
    assert total(samples, "agent_signal_workflow_duration_ms_sum") == 6 * 10.0
    assert total(samples, "agent_signal_event_latency_ms_sum") == 5 * 4.0
    assert total(samples, "agent_signal_handler_duration_ms_sum") == 6 * 2.0
