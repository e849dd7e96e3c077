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
from worker.runtime.app import build_pipeline
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


def test_a_renewal_landing_after_the_release_does_not_lease_the_scope_again(
    make_settings: Any, redis_client: Redis, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings()
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=DISABLED, app=producer.app)
    late: list[RenewCode] = []
    stop = pipeline.lease.stop_renewing

    def tick_then_stop(grant: LeaseGrant | None = None) -> None:
        if grant is not None:  # the renewer read the grant before the release and ticks after it
            late.append(pipeline.lease.tick(grant))
        stop(grant)

    monkeypatch.setattr(pipeline.lease, "stop_renewing", tick_then_stop)
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
