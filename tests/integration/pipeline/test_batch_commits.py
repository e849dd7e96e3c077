"""Batch commits (worker/drain/batch.py) on a real Redis with real worker processes: a burst commits in batches,
in order, each effect once; a worker killed in the middle of a batch redoes nothing that committed; events
whose handlers are not batch-safe, and two events sharing an idempotency lane, still run one by one."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest
from redis import Redis

from producers import Producer
from tests.conftest import wait_for
from worker.keys.layout import BucketKeys

pytestmark = pytest.mark.integration


def _batch_event(keys: BucketKeys, i: int, scope: str = "topic:batch", **payload: Any) -> dict[str, Any]:
    return {
        "sourceType": "test.batch",
        "sourceId": f"b-{i}",
        "scopeKey": scope,
        "payload": {"counterKey": f"{keys.bucket_prefix}test:batch-counter", **payload},
    }


def _done(producer: Producer, event_ids: list[str]) -> bool:
    return all((producer.status(e) or {}).get("status") == "done" for e in event_ids)


def _ints(redis_client: Redis, keys: BucketKeys, name: str, n: int) -> list[int]:
    return [int(redis_client.get(f"{keys.bucket_prefix}test:{name}:b-{i}") or 0) for i in range(n)]


def test_a_burst_commits_in_batches_in_order_and_once(
    make_settings: Any, start_worker: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """100 queued events of one scope: they commit in batches of at most 16, in enqueue order, each effect
    applied once and each chain run once."""
    settings = make_settings(commit_batch_max=16)
    producer = Producer(settings)
    ids = [r.event_id for r in producer.enqueue_many([_batch_event(keys, i) for i in range(100)])]
    start_worker(settings)
    wait_for(lambda: _done(producer, ids), timeout_s=90, what="100 batched events")
    assert redis_client.lrange(f"{keys.bucket_prefix}test:batch-order", 0, -1) == [
        f"b-{i}" for i in range(100)
    ]
    assert redis_client.get(f"{keys.bucket_prefix}test:batch-counter") == "100"
    assert _ints(redis_client, keys, "batch-runs", 100) == [1] * 100
    stats = producer.store.stats(producer.keys)
    assert stats["batchCommits"] >= 100 // 16, stats
    assert stats["batchedEvents"] >= 90, stats
    assert stats["done"] == 100
    producer.close()


def test_sigkill_in_the_middle_of_a_batch_redoes_nothing_committed(
    make_settings: Any, start_worker: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """Batch 1 (events 0-15) commits; the worker child is killed while batch 2 runs event 19's chain. The
    committed events never run again, events 16-19 run again (the drain after a lost delivery goes one by
    one), every effect applies once, order is kept, and only batch 2's head (event 16) counts a second
    delivery."""
    settings = make_settings(commit_batch_max=16)
    producer = Producer(settings)
    events = [_batch_event(keys, i) for i in range(30)]
    events[19]["payload"]["waitGo"] = True
    ids = [r.event_id for r in producer.enqueue_many(events)]
    start_worker(settings)
    marker = f"{keys.bucket_prefix}test:inbatch:b-19"
    pid = int(wait_for(lambda: redis_client.get(marker), timeout_s=60, what="event 19's chain"))
    assert [(producer.status(e) or {}).get("status") for e in ids[:16]] == ["done"] * 16
    os.kill(pid, signal.SIGKILL)
    redis_client.set(f"{keys.bucket_prefix}test:batch-go:b-19", 1)  # the redelivery runs it to the end
    wait_for(lambda: _done(producer, ids), timeout_s=90, what="recovery of the scope")
    assert redis_client.lrange(f"{keys.bucket_prefix}test:batch-order", 0, -1) == [
        f"b-{i}" for i in range(30)
    ]
    assert redis_client.get(f"{keys.bucket_prefix}test:batch-counter") == "30"
    assert _ints(redis_client, keys, "batch-runs", 30) == [1] * 16 + [2] * 4 + [1] * 10
    attempts = [int((producer.status(e) or {})["attempts"]) for e in ids]
    assert attempts == [1] * 16 + [2] + [1] * 13
    producer.close()


def test_handlers_that_are_not_batch_safe_run_one_by_one_in_order(
    make_settings: Any, start_worker: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """A scope alternating batch-safe events with test.counter events (not batch-safe): every event done in
    enqueue order (commit times never go back), every effect once."""
    settings = make_settings(commit_batch_max=8)
    producer = Producer(settings)
    counter = f"{keys.bucket_prefix}test:mixed-counter"
    events = []
    for i in range(40):
        if i % 5 == 4:
            events.append(
                {
                    "sourceType": "test.counter",
                    "sourceId": f"c-{i}",
                    "scopeKey": "topic:batch",
                    "payload": {"counterKey": counter},
                }
            )
        else:
            events.append(_batch_event(keys, i))
    ids = [r.event_id for r in producer.enqueue_many(events)]
    start_worker(settings)
    wait_for(lambda: _done(producer, ids), timeout_s=90, what="the mixed scope")
    done_at = [int((producer.status(e) or {})["doneAt"]) for e in ids]
    assert done_at == sorted(done_at), "events committed out of enqueue order"
    assert redis_client.get(counter) == "8"
    batched = [f"b-{i}" for i in range(40) if i % 5 != 4]
    assert redis_client.lrange(f"{keys.bucket_prefix}test:batch-order", 0, -1) == batched
    assert redis_client.get(f"{keys.bucket_prefix}test:batch-counter") == str(len(batched))
    assert producer.store.stats(producer.keys).get("batchCommits", 0) > 0, (
        "the batch-safe runs were never batched"
    )
    producer.close()


def test_two_events_sharing_a_lane_apply_it_once(
    make_settings: Any, start_worker: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """Events 3 and 4 share an idempotency key: the lane applies once (event 4 replays event 3's result on
    the slow path), and the batch goes on around them."""
    settings = make_settings(commit_batch_max=16)
    producer = Producer(settings)
    events = [_batch_event(keys, i) for i in range(10)]
    for i in (3, 4):
        events[i]["payload"]["idempotencyKey"] = "shared-lane"
    ids = [r.event_id for r in producer.enqueue_many(events)]
    start_worker(settings)
    wait_for(lambda: _done(producer, ids), timeout_s=90, what="the scope")
    assert redis_client.get(f"{keys.bucket_prefix}test:batch-counter") == "9"
    order = [f"b-{i}" for i in range(10) if i != 4]
    assert redis_client.lrange(f"{keys.bucket_prefix}test:batch-order", 0, -1) == order
    chain = producer.store.get_chain(producer.keys, "chain:b-4")
    assert chain is not None
    assert [r["status"] for r in chain["envelope"]["results"]] == ["applied"]
    # The batch stopped before event 4 (its lane was taken): 4 ran again alone, and 5-9, which had run in
    # that batch but not committed, ran again in the next one.
    assert _ints(redis_client, keys, "batch-runs", 10) == [1] * 4 + [2] * 6
    producer.close()


def test_two_actions_of_one_event_sharing_a_lane_apply_it_once(
    make_settings: Any, start_worker: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """In a batched event, a second action under the same idempotency key replays the first one's result
    (as the slow path's lookup would): the effect applies once per event."""
    settings = make_settings(commit_batch_max=16)
    producer = Producer(settings)
    events = [_batch_event(keys, i, idempotencyKey=f"twin-{i}", twinActions=True) for i in range(6)]
    ids = [r.event_id for r in producer.enqueue_many(events)]
    start_worker(settings)
    wait_for(lambda: _done(producer, ids), timeout_s=90, what="the scope")
    assert redis_client.get(f"{keys.bucket_prefix}test:batch-counter") == "6"
    assert producer.store.stats(producer.keys).get("batchCommits", 0) > 0
    chain = producer.store.get_chain(producer.keys, "chain:b-0")
    assert chain is not None
    assert [r["status"] for r in chain["envelope"]["results"]] == ["applied", "applied"]
    producer.close()
