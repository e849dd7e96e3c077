"""Redriving dead events (producers/sdk/dead_letters.py), shared by ``agent-signal dlq redrive`` and
``POST /v1/dlq/redrive``: an id given twice is redriven once and reported once."""

from __future__ import annotations

from typing import Any

from producers import Producer
from producers.sdk.dead_letters import redrive_events
from worker.runtime.app import build_pipeline
from worker.telemetry.recorder import DISABLED

SCOPE = "topic:redrive-twice"


def test_an_id_given_twice_is_redriven_once(make_settings: Any) -> None:
    """``redrive X X`` answers X as redriven only, never also as notDead; the order of ids is kept."""
    settings = make_settings(max_attempts=1)
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=DISABLED, app=producer.app)
    try:
        dead = producer.enqueue(
            {"sourceType": "test.flaky", "sourceId": "twice", "scopeKey": SCOPE, "payload": {}}
        )
        assert pipeline.drain_scope(SCOPE).next == "idle"
        assert producer.status(dead.event_id)["status"] == "dead"  # type: ignore[index]
        result = redrive_events(producer, [dead.event_id, "evt_none", dead.event_id, "evt_none"])
        assert result == {"redriven": [dead.event_id], "notDead": ["evt_none"]}
        assert producer.status(dead.event_id)["status"] == "queued"  # type: ignore[index]
    finally:
        producer.close()
        pipeline.store.client.close()
