"""The pipeline's invariants on a real Redis with real worker processes (issue 2 acceptance)."""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import signal
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from redis import Redis

from producers import Producer
from tests.conftest import wait_for
from tests.support.waiting import drain_marker, marker_pid, outbox_settled
from worker.keys.layout import BucketKeys
from worker.settings import Settings

pytestmark = pytest.mark.integration


def _event(source_type: str, source_id: str, scope: str, **payload: Any) -> dict[str, Any]:
    return {"sourceType": source_type, "sourceId": source_id, "scopeKey": scope, "payload": payload}


def _status(producer: Producer, event_id: str) -> str | None:
    """The event's status; ``done`` only once nothing waits in the outbox (with scope buckets, the writes a
    commit journaled to other slots land when the relay delivers them: tests/integration/drain/test_scope_buckets.py)."""
    record = producer.status(event_id)
    if record is None:
        return None
    status = str(record["status"])
    return "settling" if status == "done" and not outbox_settled(producer.store) else status


def _storm(settings_json: str, event: dict[str, Any], per_thread: int, threads: int, out: Any) -> None:
    settings = Settings.model_validate_json(settings_json)
    producer = Producer(settings)

    def one(_: int) -> list[str]:
        return [producer.enqueue(event).status for _ in range(per_thread)]

    with ThreadPoolExecutor(threads) as pool:
        statuses = [s for chunk in pool.map(one, range(threads)) for s in chunk]
    producer.close()
    out.put(statuses)


class TestDedupe:
    def test_a_thousand_concurrent_enqueues_make_one_chain(
        self, make_settings: Any, start_worker: Any, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """1,000 enqueues of one event from 8 threads in each of 2 processes: one accepted, 999 duplicates, one effect."""
        settings = make_settings()
        counter = f"{keys.bucket_prefix}test:storm-counter"
        event = _event("test.counter", "storm-1", "topic:storm", counterKey=counter)
        ctx = multiprocessing.get_context("spawn")
        out = ctx.Queue()
        procs = [
            ctx.Process(target=_storm, args=(settings.model_dump_json(), event, 63 if i == 0 else 62, 8, out))
            for i in range(2)
        ]
        # 8 threads x 63 + 8 threads x 62 = 1000 enqueues
        for p in procs:
            p.start()
        statuses = out.get(timeout=120) + out.get(timeout=120)
        for p in procs:
            p.join(timeout=30)
        assert len(statuses) == 1000
        assert statuses.count("accepted") == 1
        assert statuses.count("duplicate") == 999

        start_worker(settings)
        producer = Producer(settings)
        event_id = producer.enqueue(event).event_id
        wait_for(lambda: _status(producer, event_id) == "done", what="the chain to finish")
        assert redis_client.get(counter) == "1"
        stats = producer.store.stats(producer.keys)
        assert stats["accepted"] == 1
        assert stats["duplicate"] == 1000  # 999 from the storm + the one above
        assert producer.status(event_id)["duplicates"] == 1000  # type: ignore[index]
        producer.close()

    def test_timestamp_is_not_part_of_the_key(self, make_settings: Any) -> None:
        """The same event sent twice with different timestamps is a duplicate (LobeHub quirk §11.3 fixed)."""
        producer = Producer(make_settings())
        first = producer.enqueue({**_event("agent.user.message", "m1", "topic:t"), "timestamp": 1})
        second = producer.enqueue({**_event("agent.user.message", "m1", "topic:t"), "timestamp": 2})
        assert (first.status, second.status) == ("accepted", "duplicate")
        assert first.event_id == second.event_id
        producer.close()


@pytest.mark.buckets
class TestScopeSerialization:
    def test_per_scope_order_and_cross_scope_parallelism(
        self, make_settings: Any, start_worker: Any, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """200 events over 5 scopes, 2 workers: per scope no overlap and enqueue order; scopes overlap."""
        settings = make_settings(max_events_per_drain=7)
        producer = Producer(settings)
        events = [
            _event("test.timeline", f"tl-{seq}", f"topic:scope-{seq % 5}", seq=seq, sleepMs=5)
            for seq in range(200)
        ]
        # Both workers are up before the first event: the test is about how they share the work, not
        # about which one boots first.
        start_worker(settings)
        start_worker(settings)
        results = producer.enqueue_many(events)
        assert all(r.status == "accepted" for r in results)
        wait_for(
            lambda: all(_status(producer, r.event_id) == "done" for r in results),
            timeout_s=90,
            what="200 events",
        )
        timeline = [json.loads(x) for x in redis_client.lrange(f"{keys.bucket_prefix}test:timeline", 0, -1)]
        assert len(timeline) == 400
        spans: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
        starts: dict[int, float] = {}
        for item in timeline:
            if item["phase"] == "start":
                starts[item["seq"]] = item["t"]
            else:
                spans[item["scope"]].append((starts[item["seq"]], item["t"], item["seq"]))
        for scope, chains in spans.items():
            by_start = sorted(chains)
            assert [c[2] for c in by_start] == sorted(c[2] for c in chains), f"{scope} ran out of order"
            for (_, end, _), (start, _, _) in itertools.pairwise(by_start):
                assert start >= end, f"{scope}: chains overlapped"
        all_spans = sorted((s, e, scope) for scope, chains in spans.items() for s, e, _ in chains)
        overlaps = sum(
            1 for (s1, e1, sc1), (s2, _, sc2) in itertools.pairwise(all_spans) if sc1 != sc2 and s2 < e1
        )
        assert overlaps > 0, "chains of different scopes never ran at the same time"
        assert len({item["pid"] for item in timeline}) == 2, "both worker processes should have worked"
        producer.close()


class TestCrashes:
    def test_sigkill_mid_action_applies_the_effect_once(
        self, make_settings: Any, start_worker: Any, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """SIGKILL of the worker child during an action: the event ends done and the counter moved once."""
        settings = make_settings()
        start_worker(settings)
        counter = f"{keys.bucket_prefix}test:kill-counter"
        producer = Producer(settings)
        first = producer.enqueue(
            _event("test.counter", "kill-1", "topic:kill", counterKey=counter, sleepMs=1500, sleepAttempts=1)
        )
        marker = f"{keys.bucket_prefix}test:inaction:kill-1"
        pid = int(wait_for(lambda: redis_client.get(marker), what="the action to start"))
        redis_client.delete(marker)
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: _status(producer, first.event_id) == "done", timeout_s=60, what="recovery")
        assert redis_client.get(counter) == "1"
        record = producer.status(first.event_id)
        assert record is not None and record["attempts"] == 2
        assert int(redis_client.get(f"{keys.bucket_prefix}test:attempts:kill-1") or 0) == 2
        producer.close()

    def test_sigkill_after_the_effect_does_not_repeat_it(
        self, make_settings: Any, start_worker: Any, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """Killed after the effect committed but before the event did: the redelivery skips the applied action."""
        settings = make_settings()
        start_worker(settings)
        counter = f"{keys.bucket_prefix}test:late-kill-counter"
        redis_client.set(f"{keys.bucket_prefix}test:sleep-after:late-1", 1500)
        producer = Producer(settings)
        ev = producer.enqueue(_event("test.counter", "late-1", "topic:late", counterKey=counter))
        pid = int(
            wait_for(
                lambda: redis_client.get(f"{keys.bucket_prefix}test:afteraction:late-1"), what="the effect"
            )
        )
        # with scope buckets the lane's write to the home slot is journaled: the relay applies it shortly
        wait_for(lambda: redis_client.get(counter) == "1", what="the effect applied")
        assert _status(producer, ev.event_id) == "processing"
        redis_client.delete(f"{keys.bucket_prefix}test:sleep-after:late-1")
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: _status(producer, ev.event_id) == "done", timeout_s=60, what="recovery")
        assert redis_client.get(counter) == "1"
        assert producer.status(ev.event_id)["attempts"] == 2  # type: ignore[index]
        # The action handler itself ran once: the second delivery replayed the stored result.
        assert int(redis_client.get(f"{keys.bucket_prefix}test:attempts:late-1") or 0) == 1
        chain = producer.store.get_chain(producer.keys, "chain:late-1")
        assert chain is not None and [r["status"] for r in chain["envelope"]["results"]] == ["applied"]
        producer.close()

    def test_crash_looping_event_ends_dead(
        self, make_settings: Any, start_worker: Any, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """An event whose worker dies on every delivery is dead-lettered after max_attempts deliveries."""
        settings = make_settings(max_attempts=2)
        start_worker(settings)
        counter = f"{keys.bucket_prefix}test:loop-counter"
        producer = Producer(settings)
        ev = producer.enqueue(
            _event("test.counter", "loop-1", "topic:loop", counterKey=counter, sleepMs=3000)
        )
        marker = f"{keys.bucket_prefix}test:inaction:loop-1"
        for _ in range(2):
            pid = int(wait_for(lambda: redis_client.get(marker), timeout_s=60, what="the action"))
            redis_client.delete(marker)
            os.kill(pid, signal.SIGKILL)
        wait_for(lambda: _status(producer, ev.event_id) == "dead", timeout_s=60, what="dead letter")
        record = producer.status(ev.event_id)
        assert record is not None
        assert "worker lost" in record["error"]
        assert redis_client.get(counter) is None
        producer.close()


@pytest.mark.buckets
class TestDeadLetters:
    def test_failing_handler_dead_letters_then_redrive_applies_once(
        self, make_settings: Any, start_worker: Any, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """A handler that always raises: dead after N attempts with its error; fixed + redrive → done, effect once."""
        settings = make_settings(max_attempts=3)
        start_worker(settings)
        producer = Producer(settings)
        ev = producer.enqueue(_event("test.flaky", "flaky-1", "topic:flaky"))
        after = producer.enqueue(
            _event("test.counter", "after-flaky", "topic:flaky", counterKey=f"{keys.bucket_prefix}test:c")
        )
        wait_for(lambda: _status(producer, ev.event_id) == "dead", timeout_s=60, what="the dead letter")
        record = producer.status(ev.event_id)
        assert record is not None
        assert record["attempts"] == 3
        assert record["error"] == "RuntimeError: flaky handler is broken"
        dlq = producer.store.dlq_list(producer.keys)
        assert [d["eventId"] for d in dlq] == [ev.event_id]
        assert dlq[0]["event"]["sourceId"] == "flaky-1"
        # The scope was not blocked forever: the next event ran after the dead one.
        wait_for(lambda: _status(producer, after.event_id) == "done", what="the event after the dead one")
        # A producer sending it again does not resurrect it.
        assert producer.enqueue(_event("test.flaky", "flaky-1", "topic:flaky")).status == "duplicate"

        redis_client.set(f"{keys.bucket_prefix}test:fixed", "1")
        from producers.sdk.dead_letters import redrive_events

        assert redrive_events(producer, [ev.event_id]) == {"redriven": [ev.event_id], "notDead": []}
        wait_for(lambda: _status(producer, ev.event_id) == "done", what="the redriven event")
        assert redis_client.get(f"{keys.bucket_prefix}test:flaky-applied") == "1"
        assert producer.store.dlq_size(producer.keys) == 0
        # Redriving a done event does nothing: had it requeued the event, the scope would run it before a
        # marker enqueued after it, so once the marker is done the effect count is final.
        assert redrive_events(producer, [ev.event_id]) == {"redriven": [], "notDead": [ev.event_id]}
        drain_marker(producer, redis_client, keys, "topic:flaky", "marker-after-redrive")
        assert redis_client.get(f"{keys.bucket_prefix}test:flaky-applied") == "1"
        assert _status(producer, ev.event_id) == "done"
        producer.close()

    def test_permanent_failure_is_dead_on_first_attempt(self, make_settings: Any, start_worker: Any) -> None:
        """A handler's PermanentFailure (a chat.request with no router configured: retrying cannot fix it) is
        dead after one attempt of max_attempts, with the handler's error."""
        settings = make_settings()
        assert settings.max_attempts > 1  # and no AGENT_SIGNAL_ROUTER_CONFIG
        start_worker(settings)
        producer = Producer(settings)
        ev = producer.enqueue(_event("chat.request", "route-1", "topic:x", request={"messages": []}))
        wait_for(lambda: _status(producer, ev.event_id) == "dead", what="dead letter")
        record = producer.status(ev.event_id)
        assert record is not None and record["attempts"] == 1
        assert "AGENT_SIGNAL_ROUTER_CONFIG is not set" in record["error"]
        producer.close()


class TestLeaseRenewal:
    def test_an_action_longer_than_the_lease_keeps_its_scope_while_another_worker_is_free(
        self, make_settings: Any, start_worker: Any, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """An action lasting four lease TTLs, a second pool process idle all along: the renewer keeps the lease, so
        nobody takes the scope. Without renewals the lease runs out, the worker's sweeper re-publishes the scope,
        the idle process takes it and charges the event a lost delivery, and the first holder's write is refused.
        (One worker of two processes: a second worker's boot would cost the suite seconds and test nothing more.)"""
        settings = make_settings(lease_ttl_s=1.0, lease_renew_interval_s=0.25)
        start_worker(settings, concurrency=2)
        producer = Producer(settings)
        counter = f"{keys.bucket_prefix}test:renewed-counter"
        ev = producer.enqueue(
            _event("test.counter", "renewed-1", "topic:renewed", counterKey=counter, sleepMs=4000)
        )
        wait_for(
            lambda: _status(producer, ev.event_id) in ("done", "dead"), timeout_s=60, what="the event to end"
        )
        record = producer.status(ev.event_id)
        assert record is not None and (record["status"], record["attempts"]) == ("done", 1), record
        assert int(redis_client.get(f"{keys.bucket_prefix}test:attempts:renewed-1") or 0) == 1
        assert redis_client.get(counter) == "1"
        assert producer.store.stats(producer.keys).get("fenceRejected", 0) == 0
        producer.close()


@pytest.mark.buckets
class TestFencing:
    def test_paused_holder_cannot_commit_after_takeover(
        self, make_settings: Any, start_worker: Any, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """SIGSTOP a lease holder past its TTL; another worker takes the scope; the late commit is rejected."""
        settings = make_settings()
        counter = f"{keys.bucket_prefix}test:fence-counter"
        producer = Producer(settings)
        first = start_worker(settings)  # concurrency 1: one pool process, which runs tasks one at a time
        # the action sleeps 3 s after its marker: the SIGSTOP below must land inside it on a loaded machine (the
        # takeover's attempt does not sleep)
        ev = producer.enqueue(
            _event(
                "test.counter", "fence-1", "topic:fence", counterKey=counter, sleepMs=3000, sleepAttempts=1
            )
        )
        marker = f"{keys.bucket_prefix}test:inaction:fence-1"
        paused = int(wait_for(lambda: redis_client.get(marker), what="the action"))
        redis_client.delete(marker)
        os.kill(paused, signal.SIGSTOP)
        try:
            second = start_worker(settings)  # the sweeper of either worker re-publishes the stranded scope
            wait_for(lambda: _status(producer, ev.event_id) == "done", timeout_s=60, what="the takeover")
            assert redis_client.get(counter) == "1"
            assert producer.store.stats(producer.keys).get("fenceRejected", 0) == 0
        finally:
            os.kill(paused, signal.SIGCONT)
        wait_for(
            lambda: producer.store.stats(producer.keys).get("fenceRejected", 0) >= 1,
            timeout_s=30,
            what="the stale write to be refused",
        )
        # Wait for the refused drain to end before asserting that it changed nothing: with the second
        # worker gone, a marker on the scope can only run in the resumed process, after its refused drain.
        second.stop()
        drain_marker(producer, redis_client, keys, "topic:fence", "fence-marker")
        assert marker_pid(redis_client, keys, "fence-marker") == paused
        assert redis_client.get(counter) == "1"
        assert _status(producer, ev.event_id) == "done"
        assert first.popen.poll() is None
        producer.close()

    def test_a_holder_paused_past_its_lease_that_nobody_took_goes_on_without_charging_the_next_event(
        self, make_settings: Any, start_worker: Any, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """SIGSTOP the only worker's drain inside an action until its lease runs out; nobody else drains. On
        resume its commit is rightly accepted (the fence is still its own). That commit began the next event with
        no lease behind it: the renewer called the lease lost, the drain stopped, and the next drain charged that
        event a lost delivery (dead, with max_attempts 1). Now the lease is taken again (RENEW_SCOPE, and the
        COMMIT that takes a next head), and both events end done on their first attempt."""
        settings = make_settings(max_attempts=1)
        counter = f"{keys.bucket_prefix}test:paused-counter"
        producer = Producer(settings)
        start_worker(settings)  # concurrency 1: the one pool process is the one stopped
        scope = "topic:paused-holder"
        first = producer.enqueue(
            _event("test.counter", "paused-1", scope, counterKey=counter, sleepMs=300)
        ).event_id
        second = producer.enqueue(_event("test.counter", "paused-2", scope, counterKey=counter)).event_id
        marker = f"{keys.bucket_prefix}test:inaction:paused-1"
        paused = int(wait_for(lambda: redis_client.get(marker), what="the first action"))
        os.kill(paused, signal.SIGSTOP)
        try:
            wait_for(
                lambda: not redis_client.exists(keys.lease(scope)), timeout_s=30, what="the lease to run out"
            )
        finally:
            os.kill(paused, signal.SIGCONT)
        for event_id in (first, second):
            wait_for(
                lambda e=event_id: _status(producer, e) in ("done", "dead"),  # type: ignore[misc]
                timeout_s=60,
                what=f"{event_id} to end",
            )
        record = producer.status(second)
        assert record is not None
        assert (_status(producer, first), record["status"], record["attempts"]) == ("done", "done", 1), record
        assert redis_client.get(counter) == "2"
        assert producer.store.stats(producer.keys).get("fenceRejected", 0) == 0
        producer.close()
