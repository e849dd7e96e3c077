"""An accepted event waits as long as it has to: admission gave its record the dedupe window as a TTL, so a scope
paused (or a backlog) longer than the window lost the event without a word (it never ran, never died, its status
answered 404, its queued count stayed up for good). Now a queued or processing record has no TTL; it gets the
window when it ends (done, cancelled, discarded). Real Redis, the real pipeline in process."""

from __future__ import annotations

from typing import Any

import pytest

from producers import Producer
from sessions.store import session_scope
from tests.conftest import wait_for
from worker.keys.layout import BucketKeys
from worker.ops.erasure import erase_user
from worker.ops.runs import RunQuery, list_runs
from worker.ops.scope_control import cancel_event, pause_scope, resume_scope
from worker.runtime.app import build_pipeline
from worker.telemetry.recorder import DISABLED

pytestmark = pytest.mark.integration

SCOPE = "topic:outlives-window"


def _event(source_id: str, counter: str) -> dict[str, Any]:
    return {
        "sourceType": "test.counter",
        "sourceId": source_id,
        "scopeKey": SCOPE,
        "payload": {"counterKey": counter},
    }


def test_an_event_queued_past_the_window_still_runs(make_settings: Any, keys: BucketKeys) -> None:
    settings = make_settings(dedupe_window_s=1)
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=DISABLED, app=producer.app)
    client, tenant = producer.store.client, producer.keys
    counter = f"{keys.bucket_prefix}test:outlives-counter"
    try:
        assert pause_scope(producer.store, tenant, SCOPE)
        waiting = producer.enqueue(_event("outlives-1", counter)).event_id
        cancelled = producer.enqueue(_event("outlives-2", counter)).event_id
        record = producer.store.locate(tenant, waiting).event(waiting)
        assert client.ttl(record) == -1  # no TTL while it waits
        assert cancel_event(producer.store, tenant, cancelled).state == "cancelled"
        assert 0 < client.ttl(producer.store.locate(tenant, cancelled).event(cancelled)) <= 1
        # Redis's clock past the window from the enqueue (a signal, not a sleep), then an admission, which trims
        # the runs indexes to the window: the waiting event stays listed, by id and among the queued.
        enqueued_ms = int(client.hget(record, "enqueuedAt") or 0)
        wait_for(lambda: _redis_ms(client) > enqueued_ms + 1_500, timeout_s=30, what="the window to pass")
        producer.enqueue(_event("outlives-3", counter) | {"scopeKey": "topic:outlives-other"})
        assert producer.status(waiting)["status"] == "queued"  # type: ignore[index]
        queued = list_runs(producer.store, tenant, RunQuery(status="queued", limit=10)).events
        assert waiting in [r["eventId"] for r in queued]
        assert resume_scope(producer.store, tenant, SCOPE, lambda ref: None)
        outcome = pipeline.drain_scope(SCOPE)
        assert producer.status(waiting)["status"] == "done", outcome  # type: ignore[index]
        assert client.get(counter) == "1"
        assert 0 < client.ttl(record) <= 1  # the window, from its end
        pipeline.drain_scope("topic:outlives-other")
        assert producer.store.stats(tenant).get("queued", 0) == 0
    finally:
        producer.close()
        pipeline.store.client.close()


def _redis_ms(client: Any) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def test_the_active_index_loses_a_ttl_it_had_and_the_heads_that_are_gone(
    make_settings: Any, keys: BucketKeys
) -> None:
    """The active index is neither trimmed nor expiring now; one written by the release before had the window as a
    TTL, which an admission takes off (else it expired a window after the upgrade with every waiting event in it).
    A head whose record is gone (expired while it waited, under the release before) leaves it when the drain
    pops the head: nothing else would ever remove it."""
    settings = make_settings()
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=DISABLED, app=producer.app)
    client, tenant = producer.store.client, producer.keys
    active = keys.runs("status", "active")
    counter = f"{keys.bucket_prefix}test:active-counter"
    try:
        assert pause_scope(producer.store, tenant, SCOPE)
        gone = producer.enqueue(_event("active-1", counter)).event_id
        client.expire(active, 3600)  # as the release before left it
        kept = producer.enqueue(_event("active-2", counter)).event_id
        assert client.ttl(active) == -1
        client.delete(producer.store.locate(tenant, gone).event(gone))  # expired while it waited
        assert resume_scope(producer.store, tenant, SCOPE, lambda ref: None)
        pipeline.drain_scope(SCOPE)
        assert producer.status(kept)["status"] == "done"  # type: ignore[index]
        assert client.zrange(active, 0, -1) == []
    finally:
        producer.close()
        pipeline.store.client.close()


def test_an_event_that_ends_past_the_window_is_indexed_at_its_end(
    make_settings: Any, keys: BucketKeys
) -> None:
    """Its indexes are scored by enqueue time and trimmed to the window, so they had dropped an event that waited
    longer while its record lives on (a window from done; for good, dead): the runs explorer did not list it, a
    lookup by its source id found nothing, and erasure did not find it through its user's index. Indexed again
    at its end (REINDEX_LATE), it is; the dead index is not trimmed by the window at all."""
    settings = make_settings(dedupe_window_s=5, max_attempts=1)
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=DISABLED, app=producer.app)
    client, tenant = producer.store.client, producer.keys
    counter = f"{keys.bucket_prefix}test:late-counter"
    try:
        assert pause_scope(producer.store, tenant, SCOPE)
        done = producer.enqueue(_event("late-done", counter) | {"userId": "u_late"}).event_id
        dead = producer.enqueue(
            {"sourceType": "test.flaky", "sourceId": "late-dead", "scopeKey": SCOPE, "payload": {}}
        ).event_id
        given_up = producer.enqueue(_event("late-cancelled", counter)).event_id
        record = producer.store.locate(tenant, done).event(done)
        enqueued_ms = int(client.hget(record, "enqueuedAt") or 0)
        wait_for(lambda: _redis_ms(client) > enqueued_ms + 5_500, timeout_s=60, what="the window to pass")
        assert cancel_event(producer.store, tenant, given_up).state == "cancelled"
        producer.enqueue(
            _event("late-other", counter) | {"scopeKey": "topic:late-other"}
        )  # trims the indexes
        assert resume_scope(producer.store, tenant, SCOPE, lambda ref: None)
        pipeline.drain_scope(SCOPE)
        assert [producer.status(e)["status"] for e in (done, dead)] == ["done", "dead"]  # type: ignore[index]

        def listed(query: RunQuery) -> list[str]:
            return [r["eventId"] for r in list_runs(producer.store, tenant, query).events]

        assert done in listed(RunQuery(scope_key=SCOPE))
        assert done in listed(RunQuery(user_id="u_late"))
        assert done in listed(RunQuery(status="done"))
        assert done in listed(RunQuery())
        assert dead in listed(RunQuery(status="dead"))
        assert given_up in listed(RunQuery(status="cancelled"))
        assert [r["eventId"] for r in producer.store.find_by_source(tenant, "late-done")] == [done]
        assert [r["eventId"] for r in producer.store.find_by_source(tenant, "late-dead")] == [dead]
        report = erase_user(producer.store, tenant, "u_late", session_scope=session_scope)
        assert report.removed["eventPayloads"] >= 1
        assert client.hget(record, "userId") is None
    finally:
        producer.close()
        pipeline.store.client.close()
