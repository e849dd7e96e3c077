"""A scope's fence expires ``FENCE_IDLE_S`` after its last grant (lib/acquire.lua): a soak walk counted a fence kept
for good per scope ever seen. A grant after it starts again at Redis's clock, above every number handed out before,
so no holder of before can match the new incarnation."""

from __future__ import annotations

from typing import Any

import pytest
from redis import Redis

from tests.support.drains import producer_and_pipeline
from worker.store.scripts import FENCE_IDLE_S

pytestmark = [pytest.mark.integration, pytest.mark.buckets]

SCOPE = "topic:fence-idle"


def test_a_fence_expires_when_idle_and_starts_again_above_its_last_number(
    make_settings: Any, redis_client: Redis
) -> None:
    with producer_and_pipeline(make_settings()) as (producer, pipeline):
        fence = producer.keys.for_scope(SCOPE).fence(SCOPE)
        for n in range(2):  # the first grant makes the fence, the second moves it on: each sets its TTL again
            producer.enqueue(
                {"sourceType": "test.timeline", "sourceId": f"s{n}", "scopeKey": SCOPE, "payload": {}}
            )
            assert pipeline.drain_scope(SCOPE).next == "idle"
            assert 100 < redis_client.ttl(fence) <= FENCE_IDLE_S  # set, or set again by the second grant
            redis_client.expire(fence, 100)
        last = int(redis_client.get(fence) or 0)
        redis_client.delete(fence)  # as its TTL would
        producer.enqueue({"sourceType": "test.timeline", "sourceId": "s2", "scopeKey": SCOPE, "payload": {}})
        assert pipeline.drain_scope(SCOPE).next == "idle"
        assert int(redis_client.get(fence) or 0) > last and redis_client.ttl(fence) > 0
