"""A redrive publishes a drain every time its script set the scope's drain marker: it published once per scope per
call, so when the drain sent for the scope's first redriven event finished (and released the scope, its marker
gone) before the loop reached the next, that event's marker was set and no drain sent; the scope waited for the
reconcile sweep (a redrive of 1,300 events over 40 scopes left 26 of them stranded a minute). Real Redis; the
finished drain is its release of the marker between the two redrives."""

from __future__ import annotations

from typing import Any

import pytest
from redis import Redis

from producers import Producer
from producers.sdk.dead_letters import redrive_events
from worker.runtime.app import build_pipeline
from worker.telemetry.recorder import DISABLED

pytestmark = pytest.mark.integration

SCOPE = "topic:redrive-publish"


def test_each_redrive_that_set_the_marker_sends_a_drain(
    make_settings: Any, redis_client: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = make_settings(max_attempts=1)
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=DISABLED, app=producer.app)
    ids = [
        producer.enqueue(
            {"sourceType": "test.flaky", "sourceId": f"p{i}", "scopeKey": SCOPE, "payload": {}}
        ).event_id
        for i in range(2)
    ]
    assert pipeline.drain_scope(SCOPE).next == "idle"
    assert [(producer.status(e) or {})["status"] for e in ids] == ["dead", "dead"]

    marker = producer.keys.scheduled(SCOPE)
    redrive = producer.store.redrive

    def then_drained(*args: Any, **kwargs: Any) -> Any:
        answer = redrive(*args, **kwargs)
        redis_client.delete(
            marker
        )  # the drain sent for it ran and released the scope before the next redrive
        return answer

    published: list[str] = []
    monkeypatch.setattr(producer.store, "redrive", then_drained)
    monkeypatch.setattr(producer.fair, "publish", published.append)
    assert redrive_events(producer, ids)["redriven"] == ids
    assert published == [producer.keys.scope_ref(SCOPE)] * 2
    producer.close()
    pipeline.store.client.close()
