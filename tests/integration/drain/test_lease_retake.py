"""RENEW_SCOPE (worker/store/lua/renew_scope.lua): a drain's lease that ran out while the drain was paused, and that
nobody took, is taken again; one the drain released itself is not. A review found the first version leasing a
scope again when a renewer tick landed just after the commit that released it, so the next drain waited out a
whole TTL ("busy")."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from redis import Redis

from producers import Producer
from worker.core.clock import now_ms
from worker.drain.lease import LeaseGrant
from worker.drain.pipeline import Pipeline
from worker.runtime.app import build_pipeline
from worker.store.calls import PeekFresh
from worker.store.records import begun_list
from worker.store.replies import RenewCode
from worker.telemetry.recorder import DISABLED

pytestmark = pytest.mark.integration

SCOPE = "topic:retake"


def _event(source_id: str) -> dict[str, Any]:
    return {"sourceType": "test.timeline", "sourceId": source_id, "scopeKey": SCOPE, "payload": {}}


def test_a_lease_that_ran_out_under_a_begun_head_is_taken_again(
    make_settings: Any, redis_client: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings()
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=DISABLED, app=producer.app)
    producer.enqueue(_event("r1"))
    grant, _, head = pipeline.lease.acquire(producer.keys, SCOPE, now_ms=now_ms())
    assert grant is not None and head is not None
    pipeline.lease.stop_renewing(grant)  # this test ticks by hand
    lease_key = grant.keys.lease(SCOPE)
    redis_client.delete(lease_key)  # it ran out while the holder was paused; nobody took the scope
    assert pipeline.lease.renew(grant) is True
    assert redis_client.get(lease_key) == grant.token
    other, _, _ = pipeline.lease.acquire(producer.keys, SCOPE, now_ms=now_ms())
    assert other is None  # held again, so nobody else is granted it
    redis_client.delete(lease_key)
    taker, _, _ = pipeline.lease.acquire(producer.keys, SCOPE, now_ms=now_ms())  # a grant moves the fence
    assert taker is not None
    pipeline.lease.stop_renewing(taker)
    with caplog.at_level(logging.WARNING, logger="worker.drain.lease"):
        assert pipeline.lease.tick(grant) == RenewCode.TAKEN_BY_ANOTHER and grant.lost.is_set()
    assert [r.getMessage() for r in caplog.records] == ["lease lost"]
    assert redis_client.get(lease_key) == taker.token
    producer.close()
    pipeline.store.client.close()


def _late_ticks(pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch) -> list[RenewCode]:
    """What a renewer's tick answers when it read the grant before the release and ticks after it: each release
    (``stop_renewing``) runs one such tick first; the answers are appended to the list returned."""
    late: list[RenewCode] = []
    stop = pipeline.lease.stop_renewing

    def tick_then_stop(grant: LeaseGrant | None = None) -> None:
        if grant is not None:
            late.append(pipeline.lease.tick(grant))
        stop(grant)

    monkeypatch.setattr(pipeline.lease, "stop_renewing", tick_then_stop)
    return late


def test_a_renewal_landing_after_the_release_does_not_lease_the_scope_again(
    make_settings: Any, redis_client: Redis, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings()
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=DISABLED, app=producer.app)
    late = _late_ticks(pipeline, monkeypatch)
    producer.enqueue(_event("r2"))
    with caplog.at_level(logging.WARNING, logger="worker.drain.lease"):
        first = pipeline.drain_scope(SCOPE)
    assert (first.processed, first.next) == (1, "idle") and late == [RenewCode.GONE]
    assert [r.getMessage() for r in caplog.records] == []  # gone by our own release: nothing was lost
    assert not redis_client.exists(producer.keys.for_scope(SCOPE).lease(SCOPE))
    producer.enqueue(_event("r3"))
    second = pipeline.drain_scope(SCOPE)
    assert (second.processed, second.next) == (1, "idle"), second  # not "busy" for a whole TTL
    producer.close()
    pipeline.store.client.close()


def test_a_renewal_landing_after_a_release_that_left_events_queued_does_not_lease_the_scope_again(
    make_settings: Any, redis_client: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn's hand-off (max_events_per_drain) releases the scope with the next event queued at its head: a late
    renewer tick finds a head, but not one it began, and answers GONE; the next drain is not kept waiting."""
    settings = make_settings(max_events_per_drain=1)
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=DISABLED, app=producer.app)
    late = _late_ticks(pipeline, monkeypatch)
    producer.enqueue(_event("h1"))
    behind = producer.enqueue(_event("h2")).event_id
    first = pipeline.drain_scope(SCOPE)
    k = producer.keys.for_scope(SCOPE)
    assert (first.processed, first.next) == (1, "again"), first
    assert redis_client.lrange(k.inbox(SCOPE), 0, -1) == [behind]  # released with an event queued at its head
    assert late == [RenewCode.GONE]
    assert not redis_client.exists(k.lease(SCOPE))
    monkeypatch.undo()
    second = pipeline.drain_scope(SCOPE)
    assert (second.processed, second.next) == (1, "again"), second  # not "busy" for a whole TTL
    assert redis_client.llen(k.inbox(SCOPE)) == 0
    producer.close()
    pipeline.store.client.close()


def test_a_peek_under_a_stale_fence_returns_nothing(make_settings: Any, redis_client: Redis) -> None:
    """PEEK_FRESH lists the events behind the head only for the fence that holds the scope: a drain whose lease
    ran out and whose scope was granted again (the fence moved, the same event still at the head) peeks nothing."""
    settings = make_settings()
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=DISABLED, app=producer.app)
    ids = [producer.enqueue(_event(f"p{n}")).event_id for n in range(3)]
    old, _, head = pipeline.lease.acquire(producer.keys, SCOPE, now_ms=now_ms())
    assert old is not None and head is not None and head.begun is not None
    pipeline.lease.stop_renewing(old)  # this test ticks by hand
    k = old.keys

    def peek(fence: int) -> list[str]:
        call = PeekFresh(k.inbox(SCOPE), k.fence(SCOPE), fence, k.event_prefix, now_ms(), ids[0], 2)
        return [b.event_id for b in begun_list(pipeline.store.scripts.run(call))]

    assert peek(old.fence) == ids[1:]
    redis_client.delete(k.lease(SCOPE))  # it ran out while the holder was paused
    new, _, again = pipeline.lease.acquire(producer.keys, SCOPE, now_ms=now_ms())
    assert new is not None and again is not None and again.begun is not None
    pipeline.lease.stop_renewing(new)
    assert again.begun.event_id == ids[0] and new.fence != old.fence  # the same head, a new fence
    assert peek(old.fence) == []
    assert peek(new.fence) == ids[1:]
    producer.close()
    pipeline.store.client.close()
