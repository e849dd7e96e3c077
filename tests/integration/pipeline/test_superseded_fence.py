"""A holder whose fence was superseded writes nothing, even where no lane was marked yet: its action's APPLY is
refused (STALE_FENCE) before anything is staged, and its run's COMMIT applies none of the lanes its events
collected. The fence is checked for itself, not only through a lane found marked by the new holder (the paused
holder tests in test_pipeline.py see ALREADY, since the new holder marked the lane first). Real Redis, drained
in this process; the takeover happens between the walk and the write: the holder's lease runs out (its renewer
stopped, as a paused holder's is) and an erasure takes the scope, which moves the fence on (ERASE_HOLD)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from redis import Redis

from producers import Producer
from worker.core.errors import LeaseLost
from worker.drain.event import EventWork
from worker.drain.lease import LeaseGrant
from worker.drain.pipeline import Pipeline
from worker.drain.ports import CancellablePort
from worker.keys.layout import BucketKeys, Keys
from worker.runtime.app import build_pipeline
from worker.store.calls import EraseHold, Release
from worker.store.records import Begun
from worker.telemetry.recorder import DISABLED

pytestmark = pytest.mark.integration

# the lease outlives the test and its renewer sleeps past it: nothing renews the lease the takeover lets go
LEASE = {"lease_ttl_s": 30.0, "lease_renew_interval_s": 10.0}
TAKER = "erasure|superseded-fence-test"


def _take_over(pipeline: Pipeline, keys: Keys, scope: str) -> int:
    """The drain's lease runs out (its renewer stopped) and an erasure holds the scope: the fence it returns is
    the scope's now, one past the drain's."""
    pipeline.lease.stop_renewing()
    k = keys.for_scope(scope)
    pipeline.store.client.delete(k.lease(scope))
    held, fence = pipeline.store.durable(EraseHold(k.lease(scope), k.fence(scope), TAKER, 30_000))
    assert int(held) == 1
    return int(fence)


def _refusals_after(
    monkeypatch: pytest.MonkeyPatch, before: Callable[[CancellablePort, str], None]
) -> list[str]:
    """Each action's APPLY (``CancellablePort.commit``) runs after ``before(port, idempotency key)``; the list
    returned fills with the refusals (LeaseLost) it meets."""
    original = CancellablePort.commit
    refused: list[str] = []

    def commit(port: CancellablePort, action: Any, key: str, result: Any, effects: Any) -> bool:
        before(port, key)
        try:
            return original(port, action, key, result, effects)
        except LeaseLost as exc:
            refused.append(str(exc))
            raise

    monkeypatch.setattr(CancellablePort, "commit", commit)
    return refused


def _let_go(pipeline: Pipeline, keys: Keys, scope: str) -> None:
    pipeline.store.scripts.run(Release(keys.for_scope(scope).lease(scope), TAKER))


def test_a_superseded_holders_apply_is_refused_before_its_lane_exists(
    make_settings: Any, redis_client: Redis, keys: BucketKeys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An event run alone (its actions applied one by one): the scope is taken over right before its action's
    APPLY, whose lane nobody marked. APPLY answers STALE_FENCE (the drain's LeaseLost): no lane, no effect, the
    event left processing at the head for the scope's next holder."""
    settings = make_settings(commit_batch_max=1, **LEASE)
    scope = "topic:superseded-apply"
    counter = f"{keys.bucket_prefix}test:superseded-apply-counter"
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=DISABLED)
    event_id = producer.enqueue(
        {
            "sourceType": "test.counter",
            "sourceId": "sup-1",
            "scopeKey": scope,
            "payload": {"counterKey": counter},
        }
    ).event_id
    lanes: list[str] = []

    def take_over(port: CancellablePort, key: str) -> None:
        lane = port.keys.idempotency(port.scope_key, key)
        assert not redis_client.exists(lane)  # nobody marked it: only the fence can refuse this write
        lanes.append(lane)
        assert _take_over(pipeline, producer.keys, scope) > port.fence

    refused = _refusals_after(monkeypatch, take_over)
    try:
        assert pipeline.drain_scope(scope).next == "lost"
    finally:
        _let_go(pipeline, producer.keys, scope)
    assert len(lanes) == 1 and len(refused) == 1 and "is stale" in refused[0], refused
    assert not redis_client.exists(lanes[0])
    assert redis_client.get(counter) is None
    assert producer.store.stats(producer.keys).get("fenceRejected", 0) == 1
    assert (producer.status(event_id) or {}).get("status") == "processing"
    producer.close()


def test_a_superseded_holders_batch_commit_applies_none_of_its_lanes(
    make_settings: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """A run of four batched events walked (their lanes collected, none marked); the scope is taken over before
    its COMMIT. The commit is rejected as stale and applies no lane: no lane key, no counter, nothing pushed
    onto the order list, the head still processing and the rest queued."""
    settings = make_settings(commit_batch_max=4, drain_ahead=False, **LEASE)
    scope = "topic:superseded-batch"
    producer = Producer(settings)
    ids = [
        r.event_id
        for r in producer.enqueue_many(
            [
                {
                    "sourceType": "test.batch",
                    "sourceId": f"sup-b-{i}",
                    "scopeKey": scope,
                    "payload": {"counterKey": f"{keys.bucket_prefix}test:batch-counter"},
                }
                for i in range(4)
            ]
        )
    ]
    pipeline = build_pipeline(settings, telemetry=DISABLED)
    original = pipeline._speculate
    walked: list[str] = []
    lanes: list[str] = []

    def speculate_then_take_over(grant: LeaseGrant, events: list[Begun]) -> list[EventWork] | None:
        works = original(grant, events)
        if not walked and works:
            walked.extend(w.begun.event_id for w in works)
            lanes.extend(lane.key for w in works for lane in w.lanes or ())
            assert _take_over(pipeline, producer.keys, scope) > grant.fence
        return works

    pipeline._speculate = speculate_then_take_over  # type: ignore[method-assign]
    try:
        assert pipeline.drain_scope(scope).next == "lost"
    finally:
        _let_go(pipeline, producer.keys, scope)
    assert walked == ids and len(lanes) == 4  # one run of four, each with its lane waiting for the commit
    assert [k for k in lanes if redis_client.exists(k)] == []
    assert redis_client.get(f"{keys.bucket_prefix}test:batch-counter") is None
    assert redis_client.lrange(f"{keys.bucket_prefix}test:batch-order", 0, -1) == []
    assert producer.store.stats(producer.keys).get("fenceRejected", 0) == 1
    assert [(producer.status(e) or {}).get("status") for e in ids] == ["processing"] + ["queued"] * 3
    producer.close()


def _redis_ms(client: Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def test_a_fence_rewound_by_a_restore_is_never_handed_out_again(
    make_settings: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """A store restored from a backup has a scope's fence back where it was, while a drain begun after the backup
    still carries the next number: the next grant must not hand that number out again (a restore walk saw the
    old drain's write accepted, out of order). Each grant takes Redis's clock when the count is below it; so does
    an erasure's hold."""
    settings = make_settings(**LEASE)
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=DISABLED)
    scope = "topic:restored-fence"
    k = producer.keys.for_scope(scope)
    for n in range(2):
        producer.enqueue(
            {"sourceType": "test.counter", "sourceId": f"rf-{n}", "scopeKey": scope, "payload": {}}
        )
    first, _, _ = pipeline.lease.acquire(producer.keys, scope, now_ms=_redis_ms(redis_client))
    assert first is not None
    pipeline.lease.stop_renewing()
    redis_client.set(k.fence(scope), first.fence - 1)  # the backup's number, taken before this grant
    redis_client.delete(k.lease(scope))  # the backup had no lease
    while _redis_ms(redis_client) <= first.fence:  # a restore takes longer than a millisecond
        pass
    second, _, _ = pipeline.lease.acquire(producer.keys, scope, now_ms=_redis_ms(redis_client))
    assert second is not None and second.fence > first.fence
    pipeline.lease.stop_renewing()
    redis_client.set(k.fence(scope), first.fence - 1)
    redis_client.delete(k.lease(scope))
    while _redis_ms(redis_client) <= second.fence:
        pass
    held, fence = pipeline.store.durable(EraseHold(k.lease(scope), k.fence(scope), TAKER, 30_000))
    assert int(held) == 1 and int(fence) > second.fence
    _let_go(pipeline, producer.keys, scope)
    producer.close()


def test_an_apply_for_an_event_not_begun_under_its_fence_is_refused(
    make_settings: Any, redis_client: Redis, keys: BucketKeys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A drain runs the scope's second event under the fence it took with the first; the store is restored from
    a backup taken while the first ran, so the fence is still the drain's but the second event is queued again
    there. Its action's APPLY is refused (an APPLY checked only the fence, and the second event's effect landed
    ahead of the first's rerun); nothing is applied."""
    settings = make_settings(commit_batch_max=1, **LEASE)
    scope = "topic:restored-apply"
    counter = f"{keys.bucket_prefix}test:restored-apply-counter"
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=DISABLED)
    ids = [
        producer.enqueue(
            {
                "sourceType": "test.counter",
                "sourceId": f"ra-{n}",
                "scopeKey": scope,
                "payload": {"counterKey": counter},
            }
        ).event_id
        for n in range(2)
    ]

    def restore(port: CancellablePort, key: str) -> None:
        if port.event_id == ids[1]:  # as the backup has it: queued, never begun
            event = producer.keys.for_scope(scope).event(ids[1])
            redis_client.hset(event, "state", "queued")
            redis_client.hdel(event, "fence")

    refused = _refusals_after(monkeypatch, restore)
    try:
        assert pipeline.drain_scope(scope).next == "lost"
    finally:
        pipeline.lease.stop_renewing()
    assert len(refused) == 1 and "is stale" in refused[0], refused
    assert redis_client.get(counter) == "1"  # the first event's, not the second's
    producer.close()
