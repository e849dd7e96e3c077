"""A head that waits for its retry time (worker/drain/pipeline.py ``hand_off``): the wait is at most
``retry_cap_ms``, and the scope's drain marker covers it, so the reconcile sweep does not publish a drain per sweep
for a scope that only waits. Before, ``RetryLater(delay_s=7200)`` (or a retry time written by a worker whose clock
ran two hours ahead) handed off with a 7,200 s countdown, past the broker's visibility timeout, and each sweep
after the marker went stale added one more such message: seven after six sweeps, without end."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any
from unittest import mock

import pytest
from redis import Redis

import worker.drain.event as drain_event
from producers import Producer
from worker.core.clock import now_ms
from worker.runtime.app import build_pipeline
from worker.runtime.reconcile import reconcile
from worker.settings import Settings
from worker.telemetry.recorder import DISABLED

pytestmark = pytest.mark.integration

RETRY_CAP_MS = 20_000
SCOPE = "topic:waits"


@pytest.fixture
def settings(make_settings: Any) -> Settings:
    return make_settings(fair_share=False, push_drain_messages=False, retry_cap_ms=RETRY_CAP_MS)


@pytest.fixture
def producer(settings: Settings) -> Iterator[Producer]:
    made = Producer(settings)
    yield made
    made.close()


def _sweep(producer: Producer) -> list[str]:
    sent: list[str] = []

    def publish(refs: Sequence[str], *, waiting: int) -> None:
        sent.extend(refs)

    reconcile(producer.store, publish, stale_after_ms=0)  # any marker not covering a wait is stale
    return sent


def _flaky(producer: Producer, source_id: str, **payload: Any) -> str:
    event = {"sourceType": "test.flaky", "sourceId": source_id, "scopeKey": SCOPE, "payload": payload}
    return producer.enqueue(event).event_id


def test_retry_later_waits_at_most_the_cap_and_the_sweep_leaves_the_scope_alone(
    settings: Settings, producer: Producer, redis_client: Redis
) -> None:
    event_id = _flaky(producer, "two-hours", retryLaterS=7200)
    pipeline = build_pipeline(settings, telemetry=DISABLED, app=producer.app)
    outcome = pipeline.drain_scope(SCOPE)
    after = now_ms()
    assert outcome.next == "again" and 0 < outcome.delay_s <= RETRY_CAP_MS / 1000, outcome
    record = producer.status(event_id)
    assert record is not None and record["status"] == "queued"
    event_key = producer.keys.for_scope(SCOPE).event(event_id)
    not_before = int(redis_client.hget(event_key, "notBefore") or 0)
    assert 0 < not_before <= after + RETRY_CAP_MS, not_before - after  # capped, whatever the drain took
    marker_ms = redis_client.pttl(producer.keys.scheduled(SCOPE))
    assert marker_ms > producer.store.schedule_ttl_ms  # it covers the wait
    assert _sweep(producer) == []
    pipeline.store.client.close()


def test_a_retry_time_written_hours_ahead_is_waited_for_at_most_the_cap(
    settings: Settings, producer: Producer
) -> None:
    """The retry time comes from the worker that ran the event; one whose clock runs two hours ahead writes a time
    the next worker would wait two hours for."""
    _flaky(producer, "skewed", failTimes=1)
    ahead = build_pipeline(settings, telemetry=DISABLED, app=producer.app)
    with mock.patch.object(drain_event, "now_ms", lambda: now_ms() + 7_200_000):
        first = ahead.drain_scope(SCOPE)
    assert first.next == "again" and first.delay_s <= RETRY_CAP_MS / 1000, first
    on_time = build_pipeline(settings, telemetry=DISABLED, app=producer.app)
    second = on_time.drain_scope(SCOPE)  # came early: the head still waits, and the wait is capped again
    assert (second.processed, second.next) == (0, "again") and second.delay_s <= RETRY_CAP_MS / 1000, second
    assert _sweep(producer) == []
    ahead.store.client.close()
    on_time.store.client.close()


def test_a_drain_that_lost_its_lease_sets_no_wait_marker(
    settings: Settings, producer: Producer, redis_client: Redis
) -> None:
    """The marker is set under our lease only (HAND_OFF): a drain whose lease ran out, and whose scope another
    holder may have released since, must not mark the scope as having a drain due, or the next event's drain
    would not be published."""
    _flaky(producer, "lost", failTimes=1)
    pipeline = build_pipeline(settings, telemetry=DISABLED, app=producer.app)
    grant, _, head = pipeline.lease.acquire(producer.keys, SCOPE, now_ms=now_ms())
    assert grant is not None and head is not None
    pipeline.lease.stop_renewing(grant)
    marker = producer.keys.scheduled(SCOPE)
    redis_client.delete(grant.keys.lease(SCOPE), marker)
    assert (
        pipeline.lease.hand_off(grant, marker_px=600_000, ttl_ms=60_000) is True
    )  # released (it had expired)
    assert not redis_client.exists(marker)
    again, _, _ = pipeline.lease.acquire(producer.keys, SCOPE, now_ms=now_ms())
    assert again is not None
    assert pipeline.lease.hand_off(again, marker_px=600_000, ttl_ms=60_000) is True
    assert redis_client.pttl(marker) > producer.store.schedule_ttl_ms  # under its own lease: set
    pipeline.store.client.close()
