"""Every walk's handler runs are counted exactly once (worker/drain/event.py): with its commit's metrics when it
committed (one plan), on their own when nothing committed it (a refused fence, a lost lease, a re-run), and
never twice when the drain's sweep (``count_runs`` after every commit) meets a walk its commit counted."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from tests.support.prom import total
from tests.unit.worker.chain.test_chain_run import _chain
from tests.unit.worker.telemetry.test_telemetry_plan import _runs, _scrape, _telemetry
from worker.drain.context import DrainContext
from worker.drain.event import EventWork, count_runs, record
from worker.store.records import CommitReply
from worker.store.replies import CommitCode


def _work(reply: CommitReply | None) -> Any:
    """The fields of an EventWork that record and count_runs read."""
    return SimpleNamespace(
        reply=reply,
        grant=SimpleNamespace(keys=SimpleNamespace(tenant="a")),
        source_type="agent.user.message",
        status="generated",
        started_s=0.0,
        outcome="done",
        chain=_chain("applied"),
        runs=_runs("ok", "ok"),
    )


@pytest.mark.parametrize(
    "reply",
    [
        CommitReply(CommitCode.COMMITTED, outcome="done", latency_ms=3),
        CommitReply(CommitCode.STALE_FENCE),
        None,  # lost: no reply at all
    ],
    ids=["committed", "refused by the fence", "lost"],
)
def test_a_walks_runs_are_counted_once_whatever_ends_it(reply: CommitReply | None) -> None:
    telemetry, metrics = _telemetry()
    ctx = cast(DrainContext, SimpleNamespace(telemetry=telemetry))
    work = cast(EventWork, _work(reply))
    if reply is not None:
        record(ctx, work)
    count_runs(ctx, work)  # the drain's sweep after every commit
    count_runs(ctx, work)
    samples = _scrape(telemetry, metrics)
    assert total(samples, "agent_signal_handler_runs_total") == 2
    assert total(samples, "agent_signal_handler_duration_ms_sum") == 2.0 + 3.0
    committed = reply is not None and reply.code is CommitCode.COMMITTED
    assert total(samples, "agent_signal_chains_total") == (1 if committed else 0)
    # a committed walk's runs are in its event's plan; the others' in a plan of their own
    assert len(telemetry._run_plans) == (0 if committed else 1)
    assert work.runs is None
