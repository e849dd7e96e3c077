"""The Overview's per-minute series (a bucket's ``series`` hash) is trimmed by the commits that write it: a soak walk
saw an unread tenant's series gain two fields a minute for good, because only ``GET /v1/overview`` trimmed it. The
minute's first commit in a bucket drops the minutes before the Overview's hour and sets the hash to expire."""

from __future__ import annotations

from typing import Any

import pytest
from redis import Redis

from tests.support.drains import producer_and_pipeline
from worker.store.scripts import SERIES_MINUTES

pytestmark = [pytest.mark.integration, pytest.mark.buckets]

SCOPE = "topic:series"


def test_a_commit_drops_the_minutes_before_the_overviews_hour(
    make_settings: Any, redis_client: Redis
) -> None:
    with producer_and_pipeline(make_settings()) as (producer, pipeline):
        series = producer.keys.for_scope(SCOPE).series
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
        producer.enqueue({"sourceType": "test.timeline", "sourceId": "s1", "scopeKey": SCOPE, "payload": {}})
        assert pipeline.drain_scope(SCOPE).next == "idle"
        fields = redis_client.hgetall(series)
        assert not {f"{old}:done", f"{old}:latency_ms", f"{week}:done"} & set(fields), fields
        assert fields[f"{shown}:done"] == "2"
        assert (
            sum(int(v) for f, v in fields.items() if f.endswith(":done") and int(f.split(":")[0]) >= minute)
            == 1
        )
        assert 0 < redis_client.ttl(series) <= (SERIES_MINUTES + 2) * 60
