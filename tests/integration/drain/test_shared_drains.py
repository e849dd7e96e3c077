"""One drain message drains many scopes (worker/runtime/fair.py), on a real Redis with real worker processes: few
messages for many one-event scopes, a hot scope that cannot starve cold ones, and a worker killed in the
middle of a multi-scope drain losing nothing and applying nothing twice."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from producers import Producer
from tests.conftest import wait_for
from tests.support.drains import KEEP_DIR_ENV, StateSampler, describe, recovery_state
from worker.keys.layout import BucketKeys

pytestmark = pytest.mark.integration


def _counter(keys: BucketKeys, i: int) -> str:
    return f"{keys.bucket_prefix}test:shared-counter:{i}"


def _counter_events(keys: BucketKeys, n: int, **payload: Any) -> list[dict[str, Any]]:
    return [
        {
            "sourceType": "test.counter",
            "sourceId": f"sd-{i}",
            "scopeKey": f"topic:sd-{i}",
            "payload": {"counterKey": _counter(keys, i), **payload},
        }
        for i in range(n)
    ]


def _all_done(producer: Producer, event_ids: list[str]) -> bool:
    return all((producer.status(e) or {}).get("status") == "done" for e in event_ids)


def test_many_one_event_scopes_share_a_few_drain_messages(
    make_settings: Any, start_worker: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """120 one-event scopes queued with drain_messages_max=3 send exactly 3 messages, which drain them all;
    each effect applies once, and the last message retires the last ticket."""
    # A ticket TTL (the lease TTL) far beyond the test: the tickets must retire by READY_POP, not expire.
    settings = make_settings(drain_messages_max=3, scopes_per_drain=200, lease_ttl_s=60.0)
    producer = Producer(settings)
    results = producer.enqueue_many(_counter_events(keys, 120))
    assert {r.status for r in results} == {"accepted"}
    assert redis_client.llen(keys.broker_queue(settings.queue_name)) == 3
    assert redis_client.get(keys.drain_tickets) == "3"
    start_worker(settings)
    ids = [r.event_id for r in results]
    wait_for(lambda: _all_done(producer, ids), timeout_s=90, what="120 one-event scopes")
    assert [redis_client.get(_counter(keys, i)) for i in range(120)] == ["1"] * 120
    wait_for(lambda: not redis_client.exists(keys.drain_tickets), what="the tickets to retire")
    producer.close()


def test_a_hot_scope_hands_off_to_cold_scopes(
    make_settings: Any, start_worker: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """A scope with 60 queued events, then 10 one-event scopes: one worker serves every cold scope after at
    most two of the hot scope's turns (max_events_per_drain=5), not after all 60 of its events."""
    settings = make_settings(max_events_per_drain=5, scopes_per_drain=4)
    producer = Producer(settings)
    hot = [
        {
            "sourceType": "test.timeline",
            "sourceId": f"hot-{i}",
            "scopeKey": "topic:hot",
            "payload": {"seq": i},
        }
        for i in range(60)
    ]
    cold = [
        {"sourceType": "test.timeline", "sourceId": f"cold-{i}", "scopeKey": f"topic:cold-{i}", "payload": {}}
        for i in range(10)
    ]
    ids = [r.event_id for r in producer.enqueue_many(hot)] + [r.event_id for r in producer.enqueue_many(cold)]
    start_worker(settings)
    wait_for(lambda: _all_done(producer, ids), timeout_s=90, what="the hot and the cold scopes")
    ends = [
        json.loads(x)["scope"]
        for x in redis_client.lrange(f"{keys.bucket_prefix}test:timeline", 0, -1)
        if json.loads(x)["phase"] == "end"
    ]
    last_cold = max(i for i, scope in enumerate(ends) if scope != "topic:hot")
    hot_before = sum(1 for scope in ends[:last_cold] if scope == "topic:hot")
    assert hot_before <= 10, f"{hot_before} of the hot scope's events ran before the last cold scope"
    hot_seq = [json.loads(x)["seq"] for x in redis_client.lrange(f"{keys.bucket_prefix}test:timeline", 0, -1)]
    hot_seq = [s for s in hot_seq if s is not None][::2]  # start records, in order
    assert hot_seq == list(range(60)), "the hot scope ran out of order"
    producer.close()


def test_sigkill_in_the_middle_of_a_multi_scope_drain(
    make_settings: Any, start_worker: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """One message drains 30 scopes; the worker child is killed during the 10th scope's action. Every event
    ends done, every effect applied exactly once, and only the killed event was delivered twice."""
    settings = make_settings(drain_messages_max=1, scopes_per_drain=100)
    producer = Producer(settings)
    events = _counter_events(keys, 30)
    events[9]["payload"].update(sleepMs=3000, sleepAttempts=1)  # its redelivery is not killed: no sleep
    results = producer.enqueue_many(events)
    assert redis_client.llen(keys.broker_queue(settings.queue_name)) == 1
    worker = start_worker(settings)
    marker = f"{keys.bucket_prefix}test:inaction:sd-9"
    pid = int(wait_for(lambda: redis_client.get(marker), timeout_s=60, what="the 10th scope's action"))
    done_before_kill = sum(1 for r in results if (producer.status(r.event_id) or {}).get("status") == "done")
    assert done_before_kill == 9, "the first nine scopes are drained by the same message, in order"
    ids = [r.event_id for r in results]

    # Where a recovery that timed out stalled (it did once, in make test, with nothing kept to say why): each
    # scope's record, lease, marker and inbox, the ready list, the tickets, the broker, the worker's log.
    def state() -> dict[str, Any]:
        def attempts(scope: str) -> dict[str, Any]:
            i = scope.rsplit("-", 1)[1]
            key = f"{keys.bucket_prefix}test:attempts:sd-{i}"
            return {"counter": redis_client.get(_counter(keys, int(i))), "actions": redis_client.get(key)}

        scopes = [(f"topic:sd-{i}", event_id) for i, event_id in enumerate(ids)]
        return recovery_state(redis_client, keys, settings.queue_name, producer, scopes, attempts)

    # a loop hunting the rare failure (TEST_WORKER_LOG_DIR): the state sampled from the kill on, the timings kept
    kept = os.environ.get(KEEP_DIR_ENV)
    run = Path(kept) / worker.log_path.stem.removesuffix("-worker-0") if kept else None
    sampler = StateSampler(run.with_suffix(".state.jsonl") if run else None, state)
    killed, killed_at = time.monotonic(), time.time()
    os.kill(pid, signal.SIGKILL)
    sampler.start()
    try:
        wait_for(
            lambda: _all_done(producer, ids),
            timeout_s=90,
            what="recovery of all 30 scopes",
            explain=lambda: f"{describe(state())}\nworker log (its end):\n{worker.log()[-20_000:]}",
        )
    finally:
        sampler.end()
        if run is not None:
            timing = {"recovery_s": round(time.monotonic() - killed, 2), "killed_at": killed_at}
            run.with_suffix(".timing").write_text(json.dumps(timing) + "\n")
    assert [redis_client.get(_counter(keys, i)) for i in range(30)] == ["1"] * 30
    attempts = [int(redis_client.get(f"{keys.bucket_prefix}test:attempts:sd-{i}") or 0) for i in range(30)]
    assert attempts == [1] * 9 + [2] + [1] * 20
    producer.close()
