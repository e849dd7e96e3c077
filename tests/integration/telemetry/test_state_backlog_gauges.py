"""``/metrics/state``'s runnable and paused backlog gauges (worker/ops/state_metrics.py) against a real Redis: the
same figures ``GET /v1/backlog`` answers KEDA, per tenant.

A deploy audit: the dashboard's "scale on this" panel plotted ``agent_signal_backlog_events``, which counts the
events of paused scopes, while KEDA scales on ``eventsRunnable``, which does not; the gauges below let it plot the
figure KEDA uses. No worker runs, so every event stays where it was enqueued.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from producers.http.app import create_web_app
from tests.support.prom import parse, total

pytestmark = [pytest.mark.integration, pytest.mark.buckets]


@pytest.fixture
def api(make_settings: Any) -> Iterator[TestClient]:
    with TestClient(create_web_app(make_settings())) as client:
        yield client


def _send(client: TestClient, source_id: str, scope: str) -> None:
    event = {"sourceType": "test.timeline", "sourceId": source_id, "scopeKey": scope, "payload": {}}
    answer = client.post("/v1/events", json=event)
    assert answer.status_code == 202, answer.text


def test_paused_events_are_in_the_backlog_and_not_runnable(api: TestClient) -> None:
    """Two events in a paused scope and one in a running scope: backlog 3, paused 2, runnable 1, the figures of
    /v1/backlog; resumed, all 3 are runnable."""
    # Given a paused scope holding two events, and another scope holding one
    paused_scope = "topic:held"
    assert api.post(f"/v1/scopes/{paused_scope}/pause").status_code == 200
    _send(api, "held-1", paused_scope)
    _send(api, "held-2", paused_scope)
    _send(api, "free-1", "topic:free")

    # When the state gauges are scraped
    state = parse(api.get("/metrics/state").text)

    # Then the paused events are in the backlog and out of the runnable count, as /v1/backlog says
    gauges = {
        name: total(state, f"agent_signal_backlog_{name}", tenant="default")
        for name in ("events", "paused_events", "runnable_events")
    }
    assert gauges == {"events": 3, "paused_events": 2, "runnable_events": 1}
    backlog = api.get("/v1/backlog").json()
    assert (backlog["eventsWaiting"], backlog["eventsPaused"], backlog["eventsRunnable"]) == (3, 2, 1)

    assert api.post(f"/v1/scopes/{paused_scope}/resume").status_code == 200
    state = parse(api.get("/metrics/state").text)
    assert total(state, "agent_signal_backlog_paused_events", tenant="default") == 0
    assert total(state, "agent_signal_backlog_runnable_events", tenant="default") == 3
