"""POP_ACQUIRE (issue 29, item 3): a drain_next message pops a ready scope and takes its lease in one round trip
on one Redis with one scope bucket, where READY_POP then ACQUIRE took two; the drain then goes on from the grant
as it always did. Round trips are counted on the client (each command, each pipeline, is one)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from redis import Redis

from producers import Producer
from worker.core.clock import now_ms
from worker.drain.lease import ScopeLease
from worker.drain.pipeline import Pipeline
from worker.runtime.app import build_pipeline
from worker.runtime.fair import FairQueue
from worker.runtime.tasks import one_round_trip
from worker.settings import Settings
from worker.store.events import EventStore
from worker.store.replies import HeadCode

pytestmark = pytest.mark.integration


class Counting(Redis):
    """A client that counts its round trips."""

    trips = 0

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.trips += 1
        return super().execute_command(*args, **options)  # type: ignore[no-untyped-call]


@dataclasses.dataclass
class Rig:
    client: Counting
    pipeline: Pipeline
    fair: FairQueue
    store: EventStore


def _rig(settings: Settings) -> Rig:
    client = Counting.from_url(settings.require_redis_url(), decode_responses=True)
    store = EventStore(client, settings)
    pipeline = build_pipeline(settings)
    pipeline.ctx = dataclasses.replace(pipeline.ctx, store=store)
    pipeline.lease = ScopeLease(
        store.scripts,
        ttl_s=30.0,
        renew_interval_s=5.0,
        run=store.durable,
        window_s=store.settings.dedupe_window_s,
    )
    fair = FairQueue(client, store.keys, None, "unused")  # no message is sent here
    for name in ("pop_acquire", "ready_pop", "acquire"):  # loaded first: a first EVALSHA is three round trips
        client.script_load(store.scripts.script(name).script)
    return Rig(client, pipeline, fair, store)


def _enqueue_lone_event(settings: Settings, source_id: str) -> str:
    producer = Producer(settings)
    try:
        result = producer.enqueue(
            {
                "sourceType": "bot.message.merged",
                "sourceId": source_id,
                "scopeKey": f"topic:{source_id}",
                "payload": {"message": "hello", "messageId": source_id},
            }
        )
    finally:
        producer.close()
    return result.event_id


def test_a_lone_event_is_popped_and_granted_in_one_round_trip(make_settings: Any) -> None:
    settings = make_settings()
    assert one_round_trip(settings)
    event_id = _enqueue_lone_event(settings, "lone-1")
    rig = _rig(settings)
    rig.client.trips = 0
    popped = rig.pipeline.lease.acquire_ready(
        rig.store.keys, rig.fair.pop_call(), now_ms=now_ms(), holder="w"
    )
    assert rig.client.trips == 1
    assert popped is not None and popped[1] is not None
    ref, (grant, remaining_ms, head) = popped[0], popped[1]
    assert ref == "default/topic:lone-1"
    assert grant is not None and remaining_ms == 0
    assert head is not None and head.code is HeadCode.TAKEN and head.begun is not None
    assert head.begun.event_id == event_id
    outcome = rig.pipeline.drain(ref, holder="w", acquired=popped[1])
    assert (outcome.processed, outcome.next) == (1, "idle")
    event = rig.store.keys.for_tenant("default").for_scope("topic:lone-1").event(event_id)
    assert rig.client.hget(event, "state") == "done"


def test_the_two_steps_take_one_round_trip_more(make_settings: Any) -> None:
    """The same lone event through READY_POP then ACQUIRE (what a cluster or scope buckets still do)."""
    settings = make_settings()
    _enqueue_lone_event(settings, "lone-2")
    rig = _rig(settings)
    rig.client.trips = 0
    ref = rig.fair.pop()
    assert ref == "default/topic:lone-2"
    keys = rig.store.keys.for_tenant("default")
    grant, _, head = rig.pipeline.lease.acquire(keys, "topic:lone-2", now_ms=now_ms(), holder="w")
    assert rig.client.trips == 2
    assert grant is not None and head is not None and head.code is HeadCode.TAKEN
    rig.pipeline.lease.stop_renewing()


def test_a_held_scope_is_popped_but_not_granted(make_settings: Any) -> None:
    settings = make_settings()
    _enqueue_lone_event(settings, "lone-3")
    rig = _rig(settings)
    lease_key = rig.store.keys.for_tenant("default").for_scope("topic:lone-3").lease("topic:lone-3")
    rig.client.set(lease_key, "someone", px=20_000)
    popped = rig.pipeline.lease.acquire_ready(rig.store.keys, rig.fair.pop_call(), now_ms=now_ms())
    assert popped is not None and popped[1] is not None
    grant, remaining_ms, head = popped[1]
    assert grant is None and head is None and 0 < remaining_ms <= 20_000
    assert rig.client.get(lease_key) == "someone"


def test_nothing_ready_retires_the_ticket(make_settings: Any) -> None:
    settings = make_settings()
    rig = _rig(settings)
    tickets = rig.store.keys.drain_tickets
    rig.client.set(tickets, 2)
    assert rig.pipeline.lease.acquire_ready(rig.store.keys, rig.fair.pop_call(), now_ms=now_ms()) is None
    assert rig.client.get(tickets) == "1"


def test_a_cluster_or_scope_buckets_keep_two_steps(make_settings: Any) -> None:
    assert not one_round_trip(make_settings(scope_buckets=4))
