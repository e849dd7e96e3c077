"""Order after redrive: a redriven event goes back to its scope's tail, so it runs after the events enqueued
behind it the first time; its status record says so (``outOfOrder``, ``redrivenAt``, ``redrives``)."""

from __future__ import annotations

from typing import Any

import pytest
from redis import Redis

from producers import Producer
from producers.sdk.dead_letters import redrive_events
from worker.keys.layout import BucketKeys
from worker.runtime.app import build_pipeline
from worker.telemetry.recorder import DISABLED

pytestmark = [pytest.mark.integration, pytest.mark.buckets]

SCOPE = "topic:redrive-order"


def _event(source_type: str, source_id: str) -> dict[str, Any]:
    return {
        "sourceType": source_type,
        "sourceId": source_id,
        "scopeKey": SCOPE,
        "payload": {"seq": source_id},
    }


def test_redriven_event_runs_after_later_events_and_says_so(
    make_settings: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """A dead event redriven after a later event of its scope ran is marked outOfOrder and finishes last."""
    settings = make_settings(max_attempts=1)
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=DISABLED, app=producer.app)
    first = producer.enqueue(_event("test.flaky", "first"))
    later = producer.enqueue(_event("test.timeline", "later"))
    assert pipeline.drain_scope(SCOPE).next == "idle"
    assert producer.status(first.event_id)["status"] == "dead"  # type: ignore[index]
    assert producer.status(later.event_id)["status"] == "done"  # type: ignore[index]

    redis_client.set(f"{keys.bucket_prefix}test:fixed", "1")
    assert redrive_events(producer, [first.event_id])["redriven"] == [first.event_id]
    queued = producer.status(first.event_id)
    assert queued is not None and queued["status"] == "queued" and queued["outOfOrder"] is True
    assert pipeline.drain_scope(SCOPE).next == "idle"

    record = producer.status(first.event_id)
    after = producer.status(later.event_id)
    assert record is not None and after is not None
    assert record["status"] == "done" and record["outOfOrder"] is True and record["redrives"] == 1
    assert record["enqueuedAt"] <= after["enqueuedAt"] <= record["redrivenAt"] <= record["doneAt"]
    assert after["doneAt"] <= record["doneAt"]
    assert "outOfOrder" not in after and "redrivenAt" not in after
    producer.close()
    pipeline.store.client.close()


def test_a_redriven_event_with_no_later_events_is_in_order(
    make_settings: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """The scope's only event, dead then redriven, runs after nothing newer: outOfOrder is false."""
    settings = make_settings(max_attempts=1)
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=DISABLED, app=producer.app)
    only = producer.enqueue(_event("test.flaky", "only"))
    assert pipeline.drain_scope(SCOPE).next == "idle"
    redis_client.set(f"{keys.bucket_prefix}test:fixed", "1")
    assert redrive_events(producer, [only.event_id])["redriven"] == [only.event_id]
    assert pipeline.drain_scope(SCOPE).next == "idle"
    record = producer.status(only.event_id)
    assert record is not None and record["status"] == "done" and record["outOfOrder"] is False
    producer.close()
    pipeline.store.client.close()
