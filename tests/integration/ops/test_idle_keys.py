"""Keys that grew for good, now bounded (a soak walk with every retention at a minute):

* the Overview's per-minute series (a bucket's ``series`` hash) is trimmed by the commits that write it, where only
  ``GET /v1/overview`` trimmed it, so an unread tenant's series gained two fields a minute for good: the minute's
  first commit in a bucket drops the minutes before the Overview's hour and sets the hash to expire;
* a scope's fence expires ``FENCE_IDLE_S`` after its last grant (lib/acquire.lua), where one was kept per scope ever
  seen; a grant after it starts again at Redis's clock, above every number handed out before, so no holder of
  before can match the new incarnation.
"""

from __future__ import annotations

from typing import Any

import pytest
from redis import Redis

from tests.support.drains import producer_and_pipeline
from worker.store.scripts import FENCE_IDLE_S, SERIES_MINUTES

pytestmark = [pytest.mark.integration, pytest.mark.buckets]

SERIES_SCOPE = "topic:series"


def test_a_commit_drops_the_minutes_before_the_overviews_hour(
    make_settings: Any, redis_client: Redis
) -> None:
    with producer_and_pipeline(make_settings()) as (producer, pipeline):
        series = producer.keys.for_scope(SERIES_SCOPE).series
        seconds, _ = redis_client.time()
        minute = int(seconds) // 60
        old, shown = minute - SERIES_MINUTES - 20, minute - 10
        week = (
            minute - 7 * 24 * 60
        )  # a backlog of before: the review found it outside a fixed range kept for good
        redis_client.hset(
            series,
            mapping={f"{old}:done": 5, f"{old}:latency_ms": 50, f"{shown}:done": 2, f"{week}:done": 9},
        )
        producer.enqueue(
            {"sourceType": "test.timeline", "sourceId": "s1", "scopeKey": SERIES_SCOPE, "payload": {}}
        )
        assert pipeline.drain_scope(SERIES_SCOPE).next == "idle"
        fields = redis_client.hgetall(series)
        assert not {f"{old}:done", f"{old}:latency_ms", f"{week}:done"} & set(fields), fields
        assert fields[f"{shown}:done"] == "2"
        assert (
            sum(int(v) for f, v in fields.items() if f.endswith(":done") and int(f.split(":")[0]) >= minute)
            == 1
        )
        assert 0 < redis_client.ttl(series) <= (SERIES_MINUTES + 2) * 60


FENCE_SCOPE = "topic:fence-idle"


def test_a_fence_expires_when_idle_and_starts_again_above_its_last_number(
    make_settings: Any, redis_client: Redis
) -> None:
    with producer_and_pipeline(make_settings()) as (producer, pipeline):
        fence = producer.keys.for_scope(FENCE_SCOPE).fence(FENCE_SCOPE)
        for n in range(2):  # the first grant makes the fence, the second moves it on: each sets its TTL again
            producer.enqueue(
                {"sourceType": "test.timeline", "sourceId": f"s{n}", "scopeKey": FENCE_SCOPE, "payload": {}}
            )
            assert pipeline.drain_scope(FENCE_SCOPE).next == "idle"
            assert 100 < redis_client.ttl(fence) <= FENCE_IDLE_S  # set, or set again by the second grant
            redis_client.expire(fence, 100)
        last = int(redis_client.get(fence) or 0)
        redis_client.delete(fence)  # as its TTL would
        producer.enqueue(
            {"sourceType": "test.timeline", "sourceId": "s2", "scopeKey": FENCE_SCOPE, "payload": {}}
        )
        assert pipeline.drain_scope(FENCE_SCOPE).next == "idle"
        assert int(redis_client.get(fence) or 0) > last and redis_client.ttl(fence) > 0
