"""A delayed drain that comes due takes its tenant's turn (worker/runtime/fair.py).

An audit measured another tenant's event 1.1 to 1.4 s behind 1,500 retries of one tenant that came due
together: each was a broker message that drained its own scope at once, outside the tenants' round robin. Now
a delayed drain that comes due makes its scope ready in its tenant's turn and goes on as a drain_next message
(``drain_due``): the ring alternates, so the other tenant's scope is drained within the first of them. Run in
this process through the task's own function, on a real Redis.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from redis import Redis

from producers import Producer
from tests.support.tenants import as_tenant
from worker.runtime import state
from worker.runtime.app import build_pipeline
from worker.runtime.fair import FairQueue
from worker.runtime.plugin_model import PluginRuntime
from worker.runtime.tasks import drain_due
from worker.settings import Settings
from worker.store.calls import ReadyPush
from worker.store.events import EventStore

pytestmark = pytest.mark.integration


@dataclasses.dataclass
class Rig:
    settings: Settings
    client: Redis
    store: EventStore
    fair: FairQueue
    process: state.WorkerProcess


@pytest.fixture
def rig(make_settings: Any) -> Iterator[Rig]:
    settings: Settings = make_settings(scopes_per_drain=2)  # a message drains two scopes, then hands on
    pipeline = build_pipeline(settings)
    store = pipeline.ctx.store
    # no app: a hand-on fails to send and gives its ticket back
    fair = FairQueue(store.client, store.keys, None, "unused")
    process = state.WorkerProcess(pipeline, fair, PluginRuntime(settings, store.client, store.keys))
    try:
        yield Rig(settings, store.client, store, fair, process)
    finally:
        state.set_factory(None)
        pipeline.lease.stop_renewing()


def _event(source_id: str) -> dict[str, Any]:
    return {
        "sourceType": "bot.message.merged",
        "sourceId": source_id,
        "scopeKey": f"topic:{source_id}",
        "payload": {"message": "hello", "messageId": source_id},
    }


def _state(rig: Rig, tenant: str, source_id: str, event_id: str) -> str | None:
    keys = rig.store.keys.for_tenant(tenant).for_scope(f"topic:{source_id}")
    return rig.client.hget(keys.event(event_id), "state")


def test_a_due_drain_takes_its_tenants_turn_and_another_tenants_scope_is_drained_first(rig: Rig) -> None:
    producer = Producer(rig.settings)
    try:
        a_ids = [as_tenant(producer, "tenant-a").enqueue(_event(f"a{i}")).event_id for i in range(5)]
        b_id = as_tenant(producer, "tenant-b").enqueue(_event("b0")).event_id
    finally:
        producer.close()
    keys = rig.store.keys
    # as if A's scopes waited on retries (delayed drains) and only B's scope were ready in the ring
    rig.client.delete(keys.ready_tenants, keys.ready("tenant-a"), keys.ready("tenant-b"), keys.drain_tickets)
    b_ref = keys.for_tenant("tenant-b").scope_ref("topic:b0")
    rig.store.scripts.run(
        ReadyPush(
            keys.ready_tenants, keys.ready("tenant-b"), keys.drain_tickets, "tenant-b", b_ref, 64, 30_000
        )
    )
    state.set_factory(lambda: rig.process)
    # A's first delayed drain comes due: its scope takes A's turn, and B's scope, which was ready first, is
    # drained in this same message (two scopes a message here); before, it drained A's scope alone
    a_ref = keys.for_tenant("tenant-a").scope_ref("topic:a0")
    assert drain_due(None, "unused", a_ref) == 2
    assert _state(rig, "tenant-b", "b0", b_id) == "done"
    assert _state(rig, "tenant-a", "a0", a_ids[0]) == "done"
    assert [_state(rig, "tenant-a", f"a{i}", a_ids[i]) for i in range(1, 5)] == ["queued"] * 4
    # its ticket, taken past the cap, went back when the message could not hand it on (no broker here): the one
    # left is B's push's, whose own drain_next message will find nothing ready and retire it
    assert rig.client.get(keys.drain_tickets) == "1"


def test_without_fair_share_a_due_drain_drains_its_own_scope(make_settings: Any) -> None:
    settings: Settings = make_settings(fair_share=False)
    pipeline = build_pipeline(settings)
    store = pipeline.ctx.store
    fair = FairQueue(store.client, store.keys, None, "unused", enabled=False)
    process = state.WorkerProcess(pipeline, fair, PluginRuntime(settings, store.client, store.keys))
    producer = Producer(settings)
    try:
        event_id = producer.enqueue(_event("solo")).event_id
        state.set_factory(lambda: process)
        assert drain_due(None, "unused", store.keys.for_tenant("default").scope_ref("topic:solo")) is None
        keys = store.keys.for_tenant("default").for_scope("topic:solo")
        assert store.client.hget(keys.event(event_id), "state") == "done"
    finally:
        producer.close()
        state.set_factory(None)
        pipeline.lease.stop_renewing()
