"""An event's applied actions stay applied however late its next run comes (worker/store/lua/lib/kept_lanes.lua).
A lane expires after AGENT_SIGNAL_IDEMPOTENCY_TTL_S while a dead event never does, so a redrive after that ran
every action that had applied before it died again (an order charged twice). A commit that does not end its
event (retry, dead) now keeps the lanes its run found or marked, without a TTL, in the event's hash; a redrive
keeps them as they are; the event's end gives them their TTL back (done, cancelled, discarded) or deletes them
(erasure). Real Redis; the lanes' TTL is a second, and the tests wait on Redis's clock past it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from redis import Redis

from producers import Producer
from producers.sdk.dead_letters import discard_events, redrive_events
from sessions.store import session_scope
from tests.conftest import wait_for
from worker.ops.erasure import erase_user
from worker.ops.scope_control import pause_scope, resume_scope
from worker.runtime.app import build_pipeline
from worker.telemetry.recorder import DISABLED

pytestmark = pytest.mark.integration

SCOPE = "topic:orders"
LANE_TTL_S = 1


def _order(source_id: str, **payload: Any) -> dict[str, Any]:
    return {"sourceType": "charge.order", "sourceId": source_id, "scopeKey": SCOPE, "payload": payload}


def _dead_order(
    make_settings: Any, source_id: str, *, user_id: str | None = None, **settings: Any
) -> tuple[Any, Any, Any, str]:
    """An order whose charge applied and whose shipping failed on its one attempt: dead."""
    made = make_settings(
        plugins=["tests.plugins.charge:plugin"],
        extra_source_types=["charge.order"],
        max_attempts=1,
        **({"idempotency_ttl_s": LANE_TTL_S} | settings),
    )
    producer = Producer(made)
    pipeline = build_pipeline(made, telemetry=DISABLED, app=producer.app)
    event = _order(source_id) | ({"userId": user_id} if user_id else {})
    event_id = producer.enqueue(event).event_id
    assert pipeline.drain_scope(SCOPE).next == "idle"
    assert (producer.status(event_id) or {})["status"] == "dead"
    return made, producer, pipeline, event_id


def _charge_pipeline(make_settings: Any, factory: str = "plugin", **overrides: Any) -> tuple[Any, Any, Any]:
    """Settings of the charge plugin (``factory``: ``plugin`` or ``batch_plugin``), a producer and a pipeline."""
    settings = make_settings(
        plugins=[f"tests.plugins.charge:{factory}"],
        extra_source_types=["charge.order"],
        **({"max_attempts": 1} | overrides),
    )
    producer = Producer(settings)
    return settings, producer, build_pipeline(settings, telemetry=DISABLED, app=producer.app)


def _lanes(client: Redis, prefix: str) -> list[str]:
    return sorted(str(k) for k in client.scan_iter(match=f"{prefix}*idem:*", count=1000))


def _redis_ms(client: Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def _past_the_lane_ttl(client: Redis) -> None:
    """Redis's clock past the lanes' TTL from now (a signal, not a sleep)."""
    until = _redis_ms(client) + LANE_TTL_S * 1000 + 200
    wait_for(lambda: _redis_ms(client) > until, timeout_s=30, what="the lane TTL to pass")


def test_a_redrive_after_the_lane_ttl_charges_once_however_long_it_waits(
    make_settings: Any, redis_client: Redis
) -> None:
    """Dead past the lane TTL, then redriven into a paused scope that waits past it again: charged once."""
    settings, producer, pipeline, event_id = _dead_order(make_settings, "order-1")
    b = producer.keys.for_scope(SCOPE)
    charged, fixed = b.plugin(SCOPE, "charged"), b.plugin(SCOPE, "shipping-fixed")
    assert redis_client.get(charged) == "1"
    (lane,) = _lanes(redis_client, settings.key_prefix)  # the charge's
    _past_the_lane_ttl(redis_client)
    assert redis_client.exists(lane)  # kept while the event is dead

    redis_client.set(fixed, "1")
    assert pause_scope(producer.store, producer.keys, SCOPE)
    assert redrive_events(producer, [event_id])["redriven"] == [event_id]
    _past_the_lane_ttl(redis_client)
    assert redis_client.ttl(lane) == -1  # kept while the redriven event waits
    assert resume_scope(producer.store, producer.keys, SCOPE, lambda ref: None)
    assert pipeline.drain_scope(SCOPE).next == "idle"
    assert (producer.status(event_id) or {})["status"] == "done"
    assert redis_client.get(charged) == "1"  # replayed from its lane, not charged again
    assert 0 < redis_client.ttl(lane) <= LANE_TTL_S  # its end gave it its TTL back
    assert redis_client.hget(b.event(event_id), "lanes") is None
    producer.close()
    pipeline.store.client.close()


def _as_begun_before_the_mark(
    client: Redis, event_key: str, lanes: list[str], *, kept: bool = True
) -> list[str]:
    """What a worker from before typed lanes (worker/core/idempotency.py) leaves: its lanes under the action id
    alone (listed in the event's hash when ``kept``: a retry or a death keeps them there), no ``typedLanes``."""
    before = [lane.replace(":charge.order:", ":", 1) for lane in lanes]
    for lane, old in zip(lanes, before, strict=True):
        assert lane != old  # typed: the source type before the action id
        client.rename(lane, old)
    client.hdel(event_key, "typedLanes", "lanes")
    if kept:
        client.hset(event_key, "lanes", json.dumps(before))
    return before


def test_an_event_first_begun_is_marked_and_its_lanes_typed(make_settings: Any, redis_client: Redis) -> None:
    settings, producer, pipeline, event_id = _dead_order(make_settings, "order-typed")
    (lane,) = _lanes(redis_client, settings.key_prefix)
    assert lane.endswith(":charge.order:order-typed:signal:order:action:charge")
    assert redis_client.hget(producer.keys.for_scope(SCOPE).event(event_id), "typedLanes") == "2"
    producer.close()
    pipeline.store.client.close()


def test_a_dead_event_a_worker_of_before_began_replays_its_lanes_when_redriven(
    make_settings: Any, redis_client: Redis
) -> None:
    """An order that died under a worker from before typed lanes, its charge applied under the action id alone;
    redriven after the upgrade (not a first delivery: it stays untyped), its charge is found there and replayed,
    not charged again, and its shipping's lane is written under the same kind of key."""
    settings, producer, pipeline, event_id = _dead_order(make_settings, "order-upgraded")
    b = producer.keys.for_scope(SCOPE)
    charged, fixed = b.plugin(SCOPE, "charged"), b.plugin(SCOPE, "shipping-fixed")
    (before,) = _as_begun_before_the_mark(
        redis_client, b.event(event_id), _lanes(redis_client, settings.key_prefix)
    )
    redis_client.set(fixed, "1")
    assert redrive_events(producer, [event_id])["redriven"] == [event_id]
    assert pipeline.drain_scope(SCOPE).next == "idle"
    assert (producer.status(event_id) or {})["status"] == "done"
    assert redis_client.get(charged) == "1"  # replayed from the lane of before
    assert sorted(_lanes(redis_client, settings.key_prefix)) == sorted(
        [before, before.replace(":charge", ":ship")]
    )
    assert redis_client.hget(b.event(event_id), "typedLanes") is None
    producer.close()
    pipeline.store.client.close()


def test_a_lost_delivery_of_a_worker_of_before_replays_its_lane(
    make_settings: Any, redis_client: Redis
) -> None:
    """A worker from before ran an order's first attempt, applied its charge and died before its commit (the
    event left processing, its lane listed nowhere): the new worker's attempt 2 finds the lane by the event's key
    of before, and does not charge again."""
    settings = make_settings(
        plugins=["tests.plugins.charge:plugin"],
        extra_source_types=["charge.order"],
        max_attempts=3,
        retry_base_ms=20_000,  # its retry waits: the drain returns after attempt 1
        retry_cap_ms=20_000,
    )
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=DISABLED, app=producer.app)
    b = producer.keys.for_scope(SCOPE)
    charged, fixed = b.plugin(SCOPE, "charged"), b.plugin(SCOPE, "shipping-fixed")
    event_id = producer.enqueue(_order("order-lost")).event_id
    pipeline.drain_scope(SCOPE)  # attempt 1: charged, shipping down: a retry
    assert (producer.status(event_id) or {})["attempts"] == 1 and redis_client.get(charged) == "1"
    _as_begun_before_the_mark(
        redis_client, b.event(event_id), _lanes(redis_client, settings.key_prefix), kept=False
    )
    redis_client.hset(b.event(event_id), "state", "processing")  # its worker died mid-attempt
    redis_client.hdel(b.event(event_id), "notBefore")
    redis_client.set(fixed, "1")
    wait_for(
        lambda: (
            pipeline.drain_scope(SCOPE).next == "idle"
            and (producer.status(event_id) or {})["status"] == "done"
        ),
        timeout_s=30,
        what="the order's next attempt",
    )
    assert redis_client.get(charged) == "1"
    producer.close()
    pipeline.store.client.close()


def test_another_source_types_first_run_does_not_take_a_lane_of_before(
    make_settings: Any, redis_client: Redis
) -> None:
    """The key of before is the one two source types with one ``sourceId`` shared: an event of the other type
    (charge.refund here: the same action ids), delivered for the first time, must not replay it, even while the
    lane lives on (kept without a TTL by a dead event); it runs its own action."""
    settings, producer, pipeline, event_id = _dead_order(make_settings, "order-shared")
    b = producer.keys.for_scope(SCOPE)
    _as_begun_before_the_mark(redis_client, b.event(event_id), _lanes(redis_client, settings.key_prefix))
    sibling_id = producer.enqueue({**_order("order-shared"), "sourceType": "charge.refund"}).event_id
    assert pipeline.drain_scope(SCOPE).next == "idle"
    assert (producer.status(sibling_id) or {})[
        "status"
    ] == "dead"  # its own shipping failed, after its charge
    assert redis_client.get(b.plugin(SCOPE, "charged")) == "2"  # its own charge ran
    producer.close()
    pipeline.store.client.close()


def test_a_redriven_head_of_before_on_the_batch_path_replays_its_lane(
    make_settings: Any, redis_client: Redis
) -> None:
    """Batch-safe handlers: an order that died under a worker from before (its charge's lane under the key of
    before), redriven with a fresh order behind it. Its run's port stages every action without reading lanes; the
    run's COMMIT must check the lane under the event's own key, find it, and send the event back to run alone,
    where the charge replays: two orders, two charges."""
    settings = make_settings(
        plugins=["tests.plugins.charge:batch_plugin"],
        extra_source_types=["charge.order"],
        max_attempts=2,  # runs of several need more than one
        commit_batch_max=16,
    )
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=DISABLED, app=producer.app)
    b = producer.keys.for_scope(SCOPE)
    charged = b.plugin(SCOPE, "charged")
    old_id = producer.enqueue(_order("order-old", shippingDown=True)).event_id
    assert pipeline.drain_scope(SCOPE).next == "idle"
    assert (producer.status(old_id) or {})["status"] == "dead" and redis_client.get(charged) == "1"
    _as_begun_before_the_mark(redis_client, b.event(old_id), _lanes(redis_client, settings.key_prefix))
    assert redrive_events(producer, [old_id])["redriven"] == [old_id]
    new_id = producer.enqueue(_order("order-new")).event_id
    assert pipeline.drain_scope(SCOPE).next == "idle"
    assert [(producer.status(e) or {})["status"] for e in (old_id, new_id)] == ["dead", "done"]
    assert redis_client.get(charged) == "2"  # the old order's charge replayed, the new one's applied
    producer.close()
    pipeline.store.client.close()


def test_a_worker_lost_on_the_last_attempt_keeps_the_lanes_it_applied(
    make_settings: Any, redis_client: Redis
) -> None:
    """max_attempts 1: the charge applies (APPLY), then the worker dies before the event's commit. Its next drain
    finds it used up and commits it dead ("worker lost") without running it, so no run said which lanes it had
    marked: the charge's lane kept its TTL, and a redrive after it charged again. APPLY lists and keeps each lane
    as it marks it now."""
    settings, producer, pipeline = _charge_pipeline(make_settings, idempotency_ttl_s=LANE_TTL_S)
    b = producer.keys.for_scope(SCOPE)
    charged, fixed = b.plugin(SCOPE, "charged"), b.plugin(SCOPE, "shipping-fixed")
    event_id = producer.enqueue(_order("order-lost", workerDies=True)).event_id
    with pytest.raises(SystemExit):
        pipeline.drain_scope(SCOPE)
    redis_client.delete(b.lease(SCOPE))  # its lease runs out
    assert pipeline.drain_scope(SCOPE).next == "idle"
    record = producer.status(event_id) or {}
    assert record["status"] == "dead" and "worker lost" in record["error"]
    (lane,) = _lanes(redis_client, settings.key_prefix)
    _past_the_lane_ttl(redis_client)
    assert redis_client.ttl(lane) == -1  # kept while the event is dead
    redis_client.set(fixed, "1")
    assert redrive_events(producer, [event_id])["redriven"] == [event_id]
    assert pipeline.drain_scope(SCOPE).next == "idle"
    assert (producer.status(event_id) or {})["status"] == "done"
    assert redis_client.get(charged) == "1"  # replayed, not charged again
    assert 0 < redis_client.ttl(lane) <= LANE_TTL_S and redis_client.hget(b.event(event_id), "lanes") is None
    producer.close()
    pipeline.store.client.close()


@pytest.mark.parametrize("stop", ["partial", "refused"])
def test_a_worker_lost_after_a_run_that_stopped_keeps_the_lanes_it_marked(
    make_settings: Any, redis_client: Redis, monkeypatch: pytest.MonkeyPatch, stop: str
) -> None:
    """A run of two: its COMMIT marks the first order's lanes, then stops, and the worker dies before committing
    that order dead on its own: PARTIAL (the shipping's staged HINCRBY fails midway: the charge's lane marked) or
    REFUSED (both lanes marked, then the order's own staged INCR of the ledger hash refused). The lanes kept
    their TTL, listed nowhere, and the next run after it charged again; the COMMIT that stops keeps them now."""
    from worker.drain import commit as drain_commit

    settings, producer, pipeline = _charge_pipeline(
        make_settings,
        "batch_plugin",
        max_attempts=2,  # runs of several need more than one
        commit_batch_max=16,
        idempotency_ttl_s=LANE_TTL_S,
    )
    b = producer.keys.for_scope(SCOPE)
    ledger, charged = b.plugin(SCOPE, "ledger"), b.plugin(SCOPE, "charged")
    first = producer.enqueue(_order("order-a", stageRefusedWrite=stop == "refused")).event_id
    producer.enqueue(_order("order-b"))
    redis_client.hset(ledger, "shipped", "not a number" if stop == "partial" else "0")

    def worker_dies(*_: Any, **__: Any) -> Any:
        raise SystemExit("the worker died between the PARTIAL commit and the dead one")

    monkeypatch.setattr(drain_commit, "commit_dead", worker_dies)
    with pytest.raises(SystemExit):
        pipeline.drain_scope(SCOPE)
    monkeypatch.undo()
    lanes = _lanes(redis_client, settings.key_prefix)  # order-a's charge (and shipping, when refused)
    assert len(lanes) == (1 if stop == "partial" else 2) and all(":order-a:" in lane for lane in lanes)
    assert all(redis_client.ttl(lane) == -1 for lane in lanes)
    assert all(lane in str(redis_client.hget(b.event(first), "lanes")) for lane in lanes)
    assert pause_scope(producer.store, producer.keys, SCOPE)
    redis_client.delete(b.lease(SCOPE))  # its lease runs out
    _past_the_lane_ttl(redis_client)
    redis_client.hset(ledger, "shipped", "0")
    assert resume_scope(producer.store, producer.keys, SCOPE, lambda ref: None)
    wait_for(lambda: pipeline.drain_scope(SCOPE).next == "idle", timeout_s=30, what="the scope to drain")
    assert redis_client.get(charged) == "2"  # each order once
    producer.close()
    pipeline.store.client.close()


def test_a_last_attempt_that_fails_before_any_action_keeps_the_earlier_attempts_lanes(
    make_settings: Any, redis_client: Redis
) -> None:
    """Attempt 1 charges and fails at shipping (a retry: its lanes kept); attempt 2 fails in the planner, before
    any action, and dies: the charge's lane is still kept, found in the event's record."""
    settings = make_settings(
        plugins=["tests.plugins.charge:plugin"],
        extra_source_types=["charge.order"],
        max_attempts=2,
        retry_base_ms=1,
        retry_cap_ms=1,
        idempotency_ttl_s=LANE_TTL_S,
    )
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=DISABLED, app=producer.app)
    event_id = producer.enqueue(_order("order-2", planFailsFromAttempt=2)).event_id

    def dead() -> bool:
        pipeline.drain_scope(SCOPE)
        return (producer.status(event_id) or {}).get("status") == "dead"

    wait_for(dead, timeout_s=30, what="the order to die on its second attempt")
    (lane,) = _lanes(redis_client, settings.key_prefix)
    assert redis_client.ttl(lane) == -1
    assert lane in str(redis_client.hget(producer.keys.for_scope(SCOPE).event(event_id), "lanes"))
    producer.close()
    pipeline.store.client.close()


def test_a_discarded_event_gives_its_lanes_their_ttl_back(make_settings: Any, redis_client: Redis) -> None:
    settings, producer, pipeline, event_id = _dead_order(make_settings, "order-3")
    (lane,) = _lanes(redis_client, settings.key_prefix)
    assert redis_client.ttl(lane) == -1
    assert discard_events(producer, [event_id], "given up")["discarded"] == [event_id]
    assert 0 < redis_client.ttl(lane) <= LANE_TTL_S
    assert redis_client.hget(producer.keys.for_scope(SCOPE).event(event_id), "lanes") is None
    producer.close()
    pipeline.store.client.close()


def test_an_erased_dead_event_takes_its_lanes_with_it(make_settings: Any, redis_client: Redis) -> None:
    """A lane holds its action's result (its detail and output): an erased user's dead event leaves none."""
    settings, producer, pipeline, _ = _dead_order(make_settings, "order-4", user_id="u_gone")
    assert len(_lanes(redis_client, settings.key_prefix)) == 1
    erase_user(producer.store, producer.keys, "u_gone", session_scope=session_scope)
    assert _lanes(redis_client, settings.key_prefix) == []
    producer.close()
    pipeline.store.client.close()


@pytest.mark.parametrize("hash_gone", [False, True])
def test_an_erasure_deletes_a_done_events_lanes_of_before(
    make_settings: Any, redis_client: Redis, hash_gone: bool
) -> None:
    """A done order whose lanes a worker from before wrote (under the action id alone; a done event's hash lists
    none), in a scope another user keeps: the erasure finds them through its chain, by the keys of before; also
    once its hash has expired (past the dedupe window; its chain outlives it), when no mark says which keys."""
    settings, producer, pipeline = _charge_pipeline(make_settings)
    b = producer.keys.for_scope(SCOPE)
    redis_client.set(b.plugin(SCOPE, "shipping-fixed"), "1")
    done_id = producer.enqueue({**_order("order-gone"), "userId": "u_gone"}).event_id
    assert pipeline.drain_scope(SCOPE).next == "idle"
    lanes = _lanes(redis_client, settings.key_prefix)
    before = _as_begun_before_the_mark(redis_client, b.event(done_id), lanes, kept=False)
    if hash_gone:
        redis_client.delete(b.event(done_id))
    producer.enqueue({**_order("order-kept"), "userId": "u_kept"})  # queued: the scope is kept
    assert erase_user(producer.store, producer.keys, "u_gone", session_scope=session_scope).busy_scopes == []
    assert len(before) == 2 and redis_client.exists(*before) == 0
    producer.close()
    pipeline.store.client.close()


@pytest.mark.parametrize("hash_gone", [False, True])
def test_an_erasure_leaves_another_events_lane_of_before_under_the_same_key(
    make_settings: Any, redis_client: Redis, hash_gone: bool
) -> None:
    """A dead order whose charge a worker from before marked under the action id alone (kept for its redrive), and
    a done refund of the same ``sourceId`` (typed lanes) of another user, in one scope: erasing the refund's user
    deletes its typed lanes and leaves the order's lane, whose key is the refund's key of before. Deleted, the
    order's redrive would charge it again. Also once the refund's hash has expired (no mark: its keys of before
    are tried, and a lane kept without a TTL is never a done event's)."""
    settings, producer, pipeline, dead_id = _dead_order(
        make_settings, "order-same", user_id="u_old", idempotency_ttl_s=3600
    )
    b = producer.keys.for_scope(SCOPE)
    lanes = _lanes(redis_client, settings.key_prefix)
    (before,) = _as_begun_before_the_mark(redis_client, b.event(dead_id), lanes)
    redis_client.set(b.plugin(SCOPE, "shipping-fixed"), "1")
    refund = {**_order("order-same"), "sourceType": "charge.refund", "userId": "u_new"}
    refund_id = producer.enqueue(refund).event_id
    assert pipeline.drain_scope(SCOPE).next == "idle"
    assert (producer.status(refund_id) or {})["status"] == "done"
    typed = [lane for lane in _lanes(redis_client, settings.key_prefix) if lane != before]
    assert len(typed) == 2 and all(":charge.refund:order-same:" in lane for lane in typed)
    assert all(redis_client.ttl(lane) > 60 for lane in typed)  # gone below by the erasure, not by their TTL
    if hash_gone:
        redis_client.delete(b.event(refund_id))
    producer.enqueue({**_order("order-kept"), "userId": "u_kept"})  # queued: the scope is kept
    assert erase_user(producer.store, producer.keys, "u_new", session_scope=session_scope).busy_scopes == []
    assert redis_client.exists(*typed) == 0 and redis_client.exists(before) == 1
    producer.close()
    pipeline.store.client.close()


def test_a_dead_event_of_a_run_of_several_keeps_the_lanes_its_commit_marked(
    make_settings: Any, redis_client: Redis
) -> None:
    """Batch-safe handlers: the two orders commit in one run, their lanes marked by the run's COMMIT; the second
    dies, and its charge's lane is kept while the first's keep their TTL."""
    settings = make_settings(
        plugins=["tests.plugins.charge:batch_plugin"],
        extra_source_types=["charge.order"],
        max_attempts=2,  # runs of several need more than one (a run's crash must not kill its head)
        commit_batch_max=16,
    )
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=DISABLED, app=producer.app)
    producer.enqueue(_order("order-ok", shippingDown=False))
    producer.enqueue(_order("order-down", shippingDown=True))
    assert pipeline.drain_scope(SCOPE).next == "idle"
    assert int(producer.store.stats(producer.keys).get("batchedEvents", 0)) == 2  # one run of two
    lanes = {lane: redis_client.ttl(lane) for lane in _lanes(redis_client, settings.key_prefix)}
    kept = sorted(lane for lane, ttl in lanes.items() if ttl == -1)
    assert len(lanes) == 3 and len(kept) == 1 and "order-down" in kept[0], (
        lanes
    )  # ok: charge, ship; down: charge
    producer.close()
    pipeline.store.client.close()


def test_a_run_whose_commit_stops_partway_keeps_the_dead_events_marked_lanes(
    make_settings: Any, redis_client: Redis
) -> None:
    """PARTIAL: in a run of two, the first order's charge lane is marked by the run's commit, then its shipping's
    staged HINCRBY fails midway (the ledger's field is no number): it is committed dead on its own, its charge's
    lane kept."""
    settings = make_settings(
        plugins=["tests.plugins.charge:batch_plugin"],
        extra_source_types=["charge.order"],
        max_attempts=2,
        commit_batch_max=16,
    )
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=DISABLED, app=producer.app)
    first = producer.enqueue(_order("order-a")).event_id
    second = producer.enqueue(_order("order-b")).event_id
    redis_client.hset(producer.keys.for_scope(SCOPE).plugin(SCOPE, "ledger"), "shipped", "not a number")
    assert pipeline.drain_scope(SCOPE).next == "idle"
    # the first dies by the run's PARTIAL commit; the second, run alone after it, by its APPLY's refusal
    assert [(producer.status(e) or {})["status"] for e in (first, second)] == ["dead", "dead"]
    lanes = {
        lane.split(":")[-5]: redis_client.ttl(lane)  # <sourceId>:signal:order:action:<name>
        for lane in _lanes(redis_client, settings.key_prefix)
    }
    assert lanes == {"order-a": -1, "order-b": -1}, lanes  # each order's charge: kept; no shipping marked
    # a lane never marked (the failing shipping's) is neither listed nor counted: it keeps nothing, and a holder
    # counted for it would let go of the lane another event's APPLY marks there later (tests/…/test_shared_lanes.py)
    b = producer.keys.for_scope(SCOPE)
    listed = [
        lane for e in (first, second) for lane in json.loads(str(redis_client.hget(b.event(e), "lanes")))
    ]
    assert sorted(listed) == _lanes(redis_client, settings.key_prefix)
    assert redis_client.hgetall(b.lane_holders) == dict.fromkeys(listed, "1")
    producer.close()
    pipeline.store.client.close()
