"""Runs ahead (worker/drain/ahead.py): while a run's COMMIT is in flight, the next run's chains run. In a real
pipeline on a real Redis, drained in this process: each chain runs once when nothing moves under the drain, the
inbox order and every effect hold, and when the inbox does move (an event cancelled, or erased, while its walk
ran ahead) the script's own checks end the run and the walks run ahead are dropped, nothing applied twice."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from redis import Redis

from producers import Producer
from tests.conftest import wait_for
from tests.support.handler_runs import handler_runs
from worker.drain.event import EventWork
from worker.drain.pipeline import Pipeline
from worker.keys.layout import BucketKeys
from worker.ops.scope_control import cancel_event
from worker.runtime.app import build_pipeline
from worker.store.records import Begun
from worker.store.replies import CancelCode
from worker.telemetry.recorder import configure_telemetry

pytestmark = pytest.mark.integration

SCOPE = "topic:ahead"
EVENTS = 40
RUN = 4  # commit_batch_max: ten runs, nine of them run ahead


def _events(keys: BucketKeys, n: int = EVENTS) -> list[dict[str, Any]]:
    return [
        {
            "sourceType": "test.batch",
            "sourceId": f"a-{i}",
            "scopeKey": SCOPE,
            "payload": {"counterKey": f"{keys.bucket_prefix}test:batch-counter"},
        }
        for i in range(n)
    ]


def _drain(pipeline: Pipeline, producer: Producer, ids: list[str]) -> None:
    for _ in range(EVENTS):  # one drain goes as far as it can; a call after it starts at the head left
        if all((producer.status(e) or {}).get("status") in ("done", "cancelled") for e in ids):
            return
        pipeline.drain_scope(SCOPE)
    raise AssertionError("the scope did not drain")


def _walks(redis_client: Redis, keys: BucketKeys, n: int = EVENTS) -> list[int]:
    return [int(redis_client.get(f"{keys.home_prefix}test:batch-runs:a-{i}") or 0) for i in range(n)]


def _spy(pipeline: Pipeline, before: Callable[[list[Begun]], None] | None = None) -> list[list[str]]:
    """Record what each look-ahead ran (its events' ids), calling ``before`` with them first."""
    seen: list[list[str]] = []
    original = pipeline._run_ahead

    def run_ahead(grant: Any, events: list[Begun], into: list[Any]) -> None:
        seen.append([b.event_id for b in events])
        if before is not None:
            before(events)
        original(grant, events, into)

    pipeline._run_ahead = run_ahead  # type: ignore[method-assign]
    return seen


@pytest.mark.parametrize("ahead", [True, False])
def test_each_chain_runs_once_in_order_with_or_without_runs_ahead(
    ahead: bool, make_settings: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    settings = make_settings(commit_batch_max=RUN, drain_ahead=ahead)
    producer = Producer(settings)
    ids = [r.event_id for r in producer.enqueue_many(_events(keys))]
    pipeline = build_pipeline(settings)
    seen = _spy(pipeline)
    _drain(pipeline, producer, ids)
    assert [(producer.status(e) or {}).get("status") for e in ids] == ["done"] * EVENTS
    assert redis_client.lrange(f"{keys.bucket_prefix}test:batch-order", 0, -1) == [
        f"a-{i}" for i in range(EVENTS)
    ]
    assert redis_client.get(f"{keys.bucket_prefix}test:batch-counter") == str(EVENTS)
    # every walk kept: the events each run took ahead were the ones the next commit took, in order
    assert _walks(redis_client, keys) == [1] * EVENTS
    if ahead:  # every run after the first ran while the run before it committed, a run's length each
        assert seen == [ids[i : i + RUN] for i in range(RUN, EVENTS, RUN)]
    else:
        assert seen == []
    stats = producer.store.stats(producer.keys)
    assert stats["batchCommits"] == EVENTS // RUN and stats["done"] == EVENTS
    producer.close()


def test_an_event_cancelled_while_its_walk_runs_ahead_is_cancelled_and_the_rest_apply_once(
    make_settings: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """The second look-ahead's second event is cancelled just before its walk: the commit that reaches it
    skips it (the script's take), the run ends there, and the walks run ahead past it are dropped and run again:
    it is cancelled, every other event done once, in order."""
    settings = make_settings(commit_batch_max=RUN)
    producer = Producer(settings)
    ids = [r.event_id for r in producer.enqueue_many(_events(keys))]
    pipeline = build_pipeline(settings)
    victim: list[str] = []

    def cancel_second_of_second(events: list[Begun]) -> None:
        if len(seen) == 2:
            victim.append(events[1].event_id)
            assert cancel_event(producer.store, producer.keys, events[1].event_id).state == "cancelled"

    seen = _spy(pipeline, cancel_second_of_second)
    _drain(pipeline, producer, ids)
    (cancelled,) = victim
    gone = ids.index(cancelled)
    assert (producer.status(cancelled) or {}).get("status") == "cancelled"
    others = [e for e in ids if e != cancelled]
    assert [(producer.status(e) or {}).get("status") for e in others] == ["done"] * (EVENTS - 1)
    order = [f"a-{i}" for i in range(EVENTS) if i != gone]
    assert redis_client.lrange(f"{keys.bucket_prefix}test:batch-order", 0, -1) == order
    assert redis_client.get(f"{keys.bucket_prefix}test:batch-counter") == str(EVENTS - 1)
    walks = _walks(redis_client, keys)
    # it walked once, ahead (dropped); the one after it in that look-ahead walked ahead, was dropped when the run
    # ended at the cancelled event, and walked again; every walk before it was kept
    assert walks[: gone + 2] == [1] * gone + [1, 2], walks
    producer.close()


def test_a_cancel_asked_while_the_runs_head_is_processing_wins_at_its_commit(
    make_settings: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """The first run's head is cancelled after its walk (it is processing: the cancel is only asked) and before
    its COMMIT: the commit ends it cancelled, its lane not applied, and goes on with the rest of the run, every
    other event done once, in order, none walked again."""
    settings = make_settings(commit_batch_max=RUN)
    producer = Producer(settings)
    n = 2 * RUN
    ids = [r.event_id for r in producer.enqueue_many(_events(keys, n))]
    pipeline = build_pipeline(settings)
    original = pipeline._speculate
    lanes: list[str] = []

    def speculate_then_cancel_head(grant: Any, events: list[Begun]) -> list[EventWork] | None:
        works = original(grant, events)
        if not lanes and works:
            assert [w.begun.event_id for w in works] == ids[:RUN]
            lanes.extend(lane.key for lane in works[0].lanes or ())
            asked = cancel_event(producer.store, producer.keys, ids[0])
            assert (asked.code, asked.state) == (CancelCode.REQUESTED, "processing")
        return works

    pipeline._speculate = speculate_then_cancel_head  # type: ignore[method-assign]
    _drain(pipeline, producer, ids)
    assert len(lanes) == 1  # its action ran, its lane waiting for the commit
    assert [(producer.status(e) or {}).get("status") for e in ids] == ["cancelled"] + ["done"] * (n - 1)
    assert not redis_client.exists(lanes[0])
    assert redis_client.lrange(f"{keys.bucket_prefix}test:batch-order", 0, -1) == [
        f"a-{i}" for i in range(1, n)
    ]
    assert redis_client.get(f"{keys.bucket_prefix}test:batch-counter") == str(n - 1)
    assert _walks(redis_client, keys, n) == [1] * n
    producer.close()


@pytest.mark.parametrize("ahead", [True, False])
def test_events_that_run_alone_amid_a_run_leave_every_walk_kept(
    ahead: bool, make_settings: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """Two events whose handlers are not batch-safe (test.counter) amid the batch: each runs alone and the
    runs around it stop there; the fresh events known behind them are not listed twice, so no walk is repeated."""
    settings = make_settings(commit_batch_max=RUN, drain_ahead=ahead)
    producer = Producer(settings)
    events = _events(keys)
    alone = (2, 9)
    for i in alone:
        events[i] = {
            "sourceType": "test.counter",
            "sourceId": f"a-{i}",
            "scopeKey": SCOPE,
            "payload": {"counterKey": f"{keys.bucket_prefix}test:alone-counter"},
        }
    ids = [r.event_id for r in producer.enqueue_many(events)]
    pipeline = build_pipeline(settings)
    _drain(pipeline, producer, ids)
    assert [(producer.status(e) or {}).get("status") for e in ids] == ["done"] * EVENTS
    batched = [i for i in range(EVENTS) if i not in alone]
    assert redis_client.lrange(f"{keys.bucket_prefix}test:batch-order", 0, -1) == [f"a-{i}" for i in batched]
    assert redis_client.get(f"{keys.bucket_prefix}test:alone-counter") == str(len(alone))
    walks = _walks(redis_client, keys)
    assert [walks[i] for i in batched] == [1] * len(batched), walks
    producer.close()


def _in_use(pipeline: Pipeline) -> int:
    """Connections of the drain's pool taken and not given back."""
    pool: Any = pipeline.store.client.connection_pool
    available = [c for c in pool.pool.queue if c is not None]
    return len([c for c in pool._connections if c not in available])


def test_a_look_ahead_that_raises_leaves_the_commit_in_flight_settled(
    make_settings: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """The first look-ahead raises once it walked its run: the run whose COMMIT was in flight is committed and
    settled, its connection is back in the pool, the walks run ahead are counted, and the drain raises. Once the
    lease runs out, the next drain takes the scope (its head a lost delivery) and every event applies once, in
    order; the handler runs counted are every walk the handler saw."""
    settings = make_settings(commit_batch_max=RUN)
    reader = InMemoryMetricReader()
    telemetry = configure_telemetry(settings, service_name="test", metric_readers=[reader])
    producer = Producer(settings, telemetry=telemetry)
    ids = [r.event_id for r in producer.enqueue_many(_events(keys))]
    pipeline = build_pipeline(settings, telemetry=telemetry)
    original = pipeline._run_ahead
    calls: list[int] = []

    def run_ahead_then_break(grant: Any, events: list[Begun], into: list[Any]) -> None:
        original(grant, events, into)
        calls.append(len(into))
        raise RuntimeError("the look-ahead broke")

    pipeline._run_ahead = run_ahead_then_break  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="the look-ahead broke"):
        pipeline.drain_scope(SCOPE)
    assert calls == [RUN]  # it walked a whole run before it raised
    telemetry.flush_measurements()
    assert handler_runs(reader, "test.batch:source") == 2 * RUN  # the committed run's walks and those ahead
    pipeline._run_ahead = original  # type: ignore[method-assign]
    assert [(producer.status(e) or {}).get("status") for e in ids[:RUN]] == ["done"] * RUN
    assert (producer.status(ids[RUN]) or {}).get("status") == "processing"  # taken by that commit
    assert _in_use(pipeline) == 0
    wait_for(
        lambda: pipeline.drain_scope(SCOPE).next == "idle",
        timeout_s=30,
        what="a drain of the scope once the lease ran out",
    )
    assert [(producer.status(e) or {}).get("status") for e in ids] == ["done"] * EVENTS
    assert redis_client.lrange(f"{keys.bucket_prefix}test:batch-order", 0, -1) == [
        f"a-{i}" for i in range(EVENTS)
    ]
    assert redis_client.get(f"{keys.bucket_prefix}test:batch-counter") == str(EVENTS)
    telemetry.flush_measurements()
    assert handler_runs(reader, "test.batch:source") == sum(_walks(redis_client, keys))
    producer.close()
    telemetry.shutdown()
