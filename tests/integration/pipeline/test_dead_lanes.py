"""An event's applied actions stay applied however late its next run comes (worker/store/lua/lib/kept_lanes.lua).
A lane expires after AGENT_SIGNAL_IDEMPOTENCY_TTL_S while a dead event never does, so a redrive after that ran
every action that had applied before it died again (an order charged twice). A commit that does not end its
event (retry, dead) now keeps the lanes its run found or marked, without a TTL, in the event's hash; a redrive
keeps them as they are; the event's end gives them their TTL back (done, cancelled, discarded) or deletes them
(erasure). Real Redis; the lanes' TTL is a second, and the tests wait on Redis's clock past it."""

from __future__ import annotations

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
        idempotency_ttl_s=LANE_TTL_S,
        **settings,
    )
    producer = Producer(made)
    pipeline = build_pipeline(made, telemetry=DISABLED, app=producer.app)
    event = _order(source_id) | ({"userId": user_id} if user_id else {})
    event_id = producer.enqueue(event).event_id
    assert pipeline.drain_scope(SCOPE).next == "idle"
    assert (producer.status(event_id) or {})["status"] == "dead"
    return made, producer, pipeline, event_id


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
    producer.close()
    pipeline.store.client.close()
