"""A dead event's applied actions stay applied however long it waits in the DLQ (worker/store/lua/keep_lanes.lua):
its lanes expired after AGENT_SIGNAL_IDEMPOTENCY_TTL_S while the event never does, so a redrive after them ran
every action that had applied before it died again (an order charged twice). A dead event's lanes now lose their
TTL until it is redriven or discarded (they get it back) or erased (they go). Real Redis."""

from __future__ import annotations

from typing import Any

import pytest
from redis import Redis

from producers import Producer
from producers.sdk.dead_letters import discard_events, redrive_events
from sessions.store import session_scope
from worker.ops.erasure import erase_user
from worker.runtime.app import build_pipeline
from worker.telemetry.recorder import DISABLED

pytestmark = pytest.mark.integration

SCOPE = "topic:orders"


def _dead_order(
    make_settings: Any, source_id: str, *, user_id: str | None = None
) -> tuple[Any, Any, Any, str]:
    """An order whose charge applied and whose shipping failed on its one attempt: dead."""
    settings = make_settings(
        plugins=["tests.plugins.charge:plugin"], extra_source_types=["charge.order"], max_attempts=1
    )
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=DISABLED, app=producer.app)
    event: dict[str, Any] = {
        "sourceType": "charge.order",
        "sourceId": source_id,
        "scopeKey": SCOPE,
        "payload": {},
    }
    if user_id:
        event["userId"] = user_id
    event_id = producer.enqueue(event).event_id
    assert pipeline.drain_scope(SCOPE).next == "idle"
    assert (producer.status(event_id) or {})["status"] == "dead"
    return settings, producer, pipeline, event_id


def _lanes(client: Redis, prefix: str) -> list[str]:
    return sorted(str(k) for k in client.scan_iter(match=f"{prefix}*idem:*", count=1000))


def test_a_redrive_after_the_lanes_expired_charges_once(make_settings: Any, redis_client: Redis) -> None:
    settings, producer, pipeline, event_id = _dead_order(make_settings, "order-1")
    b = producer.keys.for_scope(SCOPE)
    charged, fixed = b.plugin(SCOPE, "charged"), b.plugin(SCOPE, "shipping-fixed")
    assert redis_client.get(charged) == "1"
    (lane,) = _lanes(redis_client, settings.key_prefix)  # the charge's
    assert redis_client.ttl(lane) == -1  # no TTL while the event is dead: as long as it waits

    redis_client.set(fixed, "1")
    assert redrive_events(producer, [event_id])["redriven"] == [event_id]
    assert (
        0 < redis_client.ttl(lane) <= settings.idempotency_ttl_s
    )  # its TTL back, for the run that replays it
    assert pipeline.drain_scope(SCOPE).next == "idle"
    assert (producer.status(event_id) or {})["status"] == "done"
    assert redis_client.get(charged) == "1"  # replayed from the lane written back, not charged again
    producer.close()
    pipeline.store.client.close()


def test_a_discarded_event_gives_its_lanes_their_ttl_back(make_settings: Any, redis_client: Redis) -> None:
    settings, producer, pipeline, event_id = _dead_order(make_settings, "order-2")
    (lane,) = _lanes(redis_client, settings.key_prefix)
    assert redis_client.ttl(lane) == -1
    assert discard_events(producer, [event_id], "given up")["discarded"] == [event_id]
    assert 0 < redis_client.ttl(lane) <= settings.idempotency_ttl_s
    assert redis_client.hget(producer.keys.for_scope(SCOPE).event(event_id), "lanes") is None
    producer.close()
    pipeline.store.client.close()


def test_an_erased_dead_event_takes_its_lanes_with_it(make_settings: Any, redis_client: Redis) -> None:
    """A lane holds its action's result (its detail and output): an erased user's dead event leaves none."""
    settings, producer, pipeline, _ = _dead_order(make_settings, "order-3", user_id="u_gone")
    assert len(_lanes(redis_client, settings.key_prefix)) == 1
    erase_user(producer.store, producer.keys, "u_gone", session_scope=session_scope)
    assert _lanes(redis_client, settings.key_prefix) == []
    producer.close()
    pipeline.store.client.close()


def test_a_dead_event_of_a_run_of_several_keeps_the_lanes_its_commit_marked(
    make_settings: Any, redis_client: Redis
) -> None:
    """Batch-safe handlers: the two orders commit in one run, their lanes marked by the run's COMMIT; the second
    dies, and its charge's lane is kept while the first's keeps its TTL."""
    settings = make_settings(
        plugins=["tests.plugins.charge:batch_plugin"],
        extra_source_types=["charge.order"],
        max_attempts=2,  # runs of several need more than one (a run's crash must not kill its head)
        commit_batch_max=16,
    )
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=DISABLED, app=producer.app)
    for source_id, down in (("order-ok", False), ("order-down", True)):
        event = {"sourceType": "charge.order", "sourceId": source_id, "scopeKey": SCOPE, "payload": {}}
        producer.enqueue(event | {"payload": {"shippingDown": down}})
    assert pipeline.drain_scope(SCOPE).next == "idle"
    assert int(producer.store.stats(producer.keys).get("batchedEvents", 0)) == 2  # one run of two
    lanes = {lane: redis_client.ttl(lane) for lane in _lanes(redis_client, settings.key_prefix)}
    kept = sorted(lane for lane, ttl in lanes.items() if ttl == -1)
    assert len(lanes) == 3 and len(kept) == 1 and "order-down" in kept[0], (
        lanes
    )  # ok: charge, ship; down: charge
    producer.close()
    pipeline.store.client.close()
