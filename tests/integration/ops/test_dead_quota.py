"""Dead events count toward their tenant's retained events once their window has passed
(``AGENT_SIGNAL_TENANT_MAX_EVENTS``, worker/store/quotas.py). A hostile-caller walk: a dead event is kept until it is
redriven or discarded, and the retained count, kept per admission slot, let a tenant in again each window while its
poisoned events piled up in the dead-letter list: 2,900 more a window, Redis growing without end. Real Redis, the
real web app, dead events made by a real drain; their window's passing is the one thing written by hand here (the
admissions' counts dropped, the deaths dated a window and two of its slots back)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from producers import Producer
from producers.http.app import create_web_app
from tests.support.drains import dead_by_drain, producer_and_pipeline
from worker.store.quotas import BACKLOG_RETRY_S, RETAINED_SLOTS, retained_slot_ms

pytestmark = [pytest.mark.integration, pytest.mark.buckets]


def _event(source_id: str) -> dict[str, Any]:
    return {
        "sourceType": "test.timeline",
        "sourceId": source_id,
        "scopeKey": f"topic:{source_id}",
        "payload": {},
    }


def _window_passes(producer: Producer, client: Redis, window_s: int) -> None:
    for k in producer.keys.every_bucket():
        client.delete(k.retained_events)
        for event_id, died in client.zrange(k.dlq, 0, -1, withscores=True):
            client.zadd(k.dlq, {event_id: died - window_s * 1000 - 2 * retained_slot_ms(window_s)})


def test_dead_events_past_their_window_hold_room_until_discarded(
    make_settings: Any, redis_client: Redis
) -> None:
    settings = make_settings(max_attempts=1, tenant_max_events=5)
    with producer_and_pipeline(settings) as (producer, pipeline):
        dead = dead_by_drain(producer, pipeline, "dead-quota", 3)
        _window_passes(producer, redis_client, settings.dedupe_window_s)
        with TestClient(create_web_app(settings)) as api:
            room = api.post("/v1/events", json={"events": [_event("fresh-0"), _event("fresh-1")]})
            assert room.status_code == 202, room.text
            over = api.post("/v1/events", json=_event("fresh-2"))
            assert over.status_code == 429, over.text
            error = over.json()["error"]
            assert error["code"] == "quota_exceeded" and "3 dead ones" in error["message"], error
            assert "redriven or discarded" in error["message"] and int(over.headers["retry-after"]) >= 1
            assert api.post("/v1/dlq/discard", json={"eventIds": [dead[0]]}).status_code == 200
            assert api.post("/v1/events", json=_event("fresh-2")).status_code == 202


def test_a_dead_event_whose_admission_is_still_counted_is_not_counted_twice(
    make_settings: Any, redis_client: Redis
) -> None:
    """A review: a death just past the window, in the slot the admission count still keeps, counted the event
    twice. Dead events count only once their death is before the oldest slot counted began."""
    settings = make_settings(max_attempts=1, tenant_max_events=5)
    with producer_and_pipeline(settings) as (producer, pipeline):
        dead_by_drain(producer, pipeline, "dead-once", 3)
        slot_ms = retained_slot_ms(settings.dedupe_window_s)
        seconds, micros = redis_client.time()
        now = int(seconds) * 1000 + int(micros) // 1000
        counted_from = (now // slot_ms - RETAINED_SLOTS) * slot_ms
        for (
            k
        ) in producer.keys.every_bucket():  # the deaths inside the oldest counted slot, the admissions kept
            for event_id, _ in redis_client.zrange(k.dlq, 0, -1, withscores=True):
                redis_client.zadd(k.dlq, {event_id: counted_from + 1})
        with TestClient(create_web_app(settings)) as api:
            room = api.post("/v1/events", json={"events": [_event("once-0"), _event("once-1")]})
            assert room.status_code == 202, room.text
            over = api.post("/v1/events", json=_event("once-2"))
            assert over.status_code == 429 and "dead ones" not in over.json()["error"]["message"], over.text


def test_a_backlog_past_its_window_holds_room_until_workers_finish_it(
    make_settings: Any, redis_client: Redis
) -> None:
    """A walk with every worker down: the retained count is kept per admission slot, so once the window had passed
    the tenant was let in again while its queued events (which keep no TTL) all stayed, and a loud tenant's backlog
    filled a 256 MB Redis (60,148 events) under a quota sized for a fifth of it; every tenant was then refused 503.
    Events still queued or running that were admitted before the window now count, one each, until a drain ends
    them; the refusal asks again in BACKLOG_RETRY_S, not when the oldest slot leaves a day's window (a review: a
    day)."""
    settings = make_settings(tenant_max_events=5, dedupe_window_s=86_400)
    with producer_and_pipeline(settings) as (producer, pipeline):
        for i in range(3):
            producer.enqueue(_event(f"waiting-{i}"))
        window_ms = settings.dedupe_window_s * 1000 + 2 * retained_slot_ms(settings.dedupe_window_s)
        for k in producer.keys.every_bucket():  # the window passes while no worker runs
            redis_client.delete(k.retained_events)
            active = k.runs("status", "active")
            for event_id, admitted in redis_client.zrange(active, 0, -1, withscores=True):
                redis_client.zadd(active, {event_id: admitted - window_ms})
        with TestClient(create_web_app(settings)) as api:
            room = api.post("/v1/events", json={"events": [_event("late-0"), _event("late-1")]})
            assert room.status_code == 202, room.text
            over = api.post("/v1/events", json=_event("late-2"))
            assert over.status_code == 429, over.text
            error = over.json()["error"]
            assert error["code"] == "quota_exceeded" and "3 still queued or running" in error["message"], (
                error
            )
            assert int(over.headers["retry-after"]) == BACKLOG_RETRY_S
            for i in range(3):  # a worker comes back and finishes them
                assert pipeline.drain_scope(f"topic:waiting-{i}").next == "idle"
            assert api.post("/v1/events", json=_event("late-2")).status_code == 202
