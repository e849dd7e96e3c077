"""Every walk of an event's chain counts its handler runs once, whatever became of the walk (worker/drain/event.py
``record`` and ``count_runs``): committed in a batch, speculated in a batch that stopped before it and run again,
run again alone after its lane was taken. In a real pipeline on a real Redis, drained in this process, the
handler-run count of the test plugin's ``test.batch`` source handler must equal the walks that handler saw
(it counts them itself in ``test:batch-runs:<sourceId>``)."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from redis import Redis

from producers import Producer
from tests.support.handler_runs import handler_runs
from worker.keys.layout import BucketKeys
from worker.runtime.app import build_pipeline
from worker.telemetry.recorder import configure_telemetry

pytestmark = pytest.mark.integration

EVENTS = 10


def test_walks_run_again_count_their_handler_runs_once_each(
    make_settings: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """Events 3 and 4 share a lane: the batch stops before 4, whose walk and those of 5-9 are not committed and
    run again (16 walks for 10 events); the source handler's runs count 16, not 10 and not 22."""
    settings = make_settings(commit_batch_max=16)
    reader = InMemoryMetricReader()
    telemetry = configure_telemetry(settings, service_name="test", metric_readers=[reader])
    producer = Producer(settings, telemetry=telemetry)
    events = [
        {
            "sourceType": "test.batch",
            "sourceId": f"b-{i}",
            "scopeKey": "topic:runs-once",
            "payload": {
                "counterKey": f"{keys.bucket_prefix}test:batch-counter",
                **({"idempotencyKey": "shared-lane"} if i in (3, 4) else {}),
            },
        }
        for i in range(EVENTS)
    ]
    ids = [r.event_id for r in producer.enqueue_many(events)]
    pipeline = build_pipeline(settings, telemetry=telemetry)
    for _ in range(EVENTS):  # one drain goes as far as it can; each call after it starts at the head left
        if all((producer.status(e) or {}).get("status") == "done" for e in ids):
            break
        pipeline.drain_scope("topic:runs-once")
    assert all((producer.status(e) or {}).get("status") == "done" for e in ids)
    walks = [int(redis_client.get(f"{keys.home_prefix}test:batch-runs:b-{i}") or 0) for i in range(EVENTS)]
    assert sum(walks) > EVENTS, f"no walk was run again: {walks}"
    telemetry.flush_measurements()
    assert handler_runs(reader, "test.batch:source") == sum(walks)
    producer.close()
    telemetry.shutdown()
