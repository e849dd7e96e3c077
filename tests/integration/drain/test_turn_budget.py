"""A scope's turn ends after ``drain_message_budget_s`` (worker/drain/pipeline.py), not only after
``max_events_per_drain`` events: 200 events of a one-second handler held a worker slot for over three minutes while
other tenants' scopes waited behind it. The turn is decided at a commit, which then takes no next head, so the
event after it stays queued with no attempt counted, and the next drain takes it as a first delivery."""

from __future__ import annotations

from typing import Any

import pytest

from producers import Producer
from worker.runtime.app import build_pipeline
from worker.telemetry.recorder import DISABLED

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("batch", [1, 16], ids=["alone", "runs"])
def test_a_turn_ends_once_it_has_run_for_the_budget(make_settings: Any, batch: int) -> None:
    # each event sleeps 20 ms and the budget is 10 ms: whatever the machine, a turn ends at its first commit
    settings = make_settings(drain_message_budget_s=0.01, commit_batch_max=batch, max_events_per_drain=200)
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=DISABLED, app=producer.app)
    scope = "topic:turn-budget"
    ids = [
        producer.enqueue(
            {
                "sourceType": "test.timeline",
                "sourceId": f"turn-{i}",
                "scopeKey": scope,
                "payload": {"seq": i, "sleepMs": 20},
            }
        ).event_id
        for i in range(4)
    ]
    first = pipeline.drain_scope(scope)
    assert (first.processed, first.next, first.delay_s) == (1, "again", 0.0)
    statuses = [producer.status(e) for e in ids]
    assert [s["status"] for s in statuses] == ["done", "queued", "queued", "queued"]  # type: ignore[index]
    assert statuses[1]["attempts"] == 0  # type: ignore[index]  # not begun, so nothing charged
    turns = [pipeline.drain_scope(scope) for _ in range(4)]
    # the last turn ran over its budget too, so it handed off without asking whether the inbox was empty: one
    # more drain finds it so (a cost paid only by scopes whose turns run long)
    assert [(t.processed, t.next) for t in turns] == [(1, "again"), (1, "again"), (1, "again"), (0, "idle")]
    assert [producer.status(e)["attempts"] for e in ids] == [1, 1, 1, 1]  # type: ignore[index]
    producer.close()
    pipeline.store.client.close()
