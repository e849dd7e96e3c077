"""A step after an event's commit that fails (the telemetry exporter, a store error keeping a dead event's lanes)
is logged and the drain goes on: it escaped ``drain_scope`` with the scope's lease still held, so the scope's
next event waited for the lease to run out and was counted a lost delivery. Real Redis, the pipeline in process."""

from __future__ import annotations

from typing import Any

import pytest
from redis import Redis

from producers import Producer
from worker.keys.layout import BucketKeys
from worker.runtime.app import build_pipeline
from worker.telemetry.recorder import Telemetry

pytestmark = pytest.mark.integration

SCOPE = "topic:after-commit"


class ExporterDown(Telemetry):
    """Telemetry whose chain span cannot be exported (fault injection)."""

    def observe_chain(self, chain: Any) -> None:
        raise ConnectionError("the collector is down")

    def event_committed(self, *args: Any, **kwargs: Any) -> None:
        raise ConnectionError("the collector is down")


def test_a_failing_step_after_the_commit_leaves_the_scope_drained_and_released(
    make_settings: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    settings = make_settings()
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=ExporterDown(None, None), app=producer.app)
    counter = f"{keys.bucket_prefix}test:after-commit"
    ids = [
        producer.enqueue(
            {
                "sourceType": "test.counter",
                "sourceId": f"s{i}",
                "scopeKey": SCOPE,
                "payload": {"counterKey": counter},
            }
        ).event_id
        for i in range(2)
    ]
    assert pipeline.drain_scope(SCOPE).next == "idle"
    assert [(producer.status(e) or {})["status"] for e in ids] == ["done", "done"]
    assert redis_client.get(counter) == "2"
    assert not redis_client.exists(producer.keys.lease(SCOPE))
    producer.close()
    pipeline.store.client.close()
