"""An enqueue makes its scopes ready in its own script where the store is one Redis (ENQUEUE_PUSH, worker/runtime/fair.py):
the same ready lists, tickets and drain_next messages as ENQUEUE_BATCH followed by READY_PUSH, in one round
trip. The Celery app is a recorder of sent messages: what is tested is Redis next to what was sent."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from redis import Redis

from tests.conftest import SettingsFactory
from worker.core.errors import OverLimit
from worker.core.tenancy import DEFAULT_TENANT
from worker.intake.emitter import Emitter
from worker.keys.layout import BucketKeys, EngineKeys
from worker.runtime.fair import DRAIN_NEXT_TASK, FairQueue
from worker.store.events import EventStore

pytestmark = pytest.mark.integration


@dataclass
class Broker:
    """Records ``send_task`` calls; raises on every call when ``down``."""

    down: bool = False
    sent: list[str] = field(default_factory=list)

    def send_task(self, name: str, args: Any = (), **options: Any) -> None:
        if self.down:
            raise ConnectionError("broker down")
        self.sent.append(name)


def _emitter(store: EventStore, broker: Broker, *, ready: bool, messages_max: int = 5) -> Emitter:
    fair = FairQueue(store.client, store.keys, broker, "q", messages_max=messages_max, ticket_ttl_ms=60_000)
    return Emitter(
        store.settings,
        store,
        fair.publish,
        publish_many=fair.publish_many,
        ready=fair if ready else None,
        source_types=["bot.message.merged"],  # what the shipped plugins would declare
    )


def _events(tag: str) -> list[dict[str, Any]]:
    """Twelve events over six scopes (scope 0 gets seven of them)."""
    return [
        {
            "sourceType": "bot.message.merged",
            "sourceId": f"{tag}-{i}",
            "scopeKey": f"topic:{tag}-{0 if i % 2 else i // 2}",
            "payload": {"message": "hi"},
        }
        for i in range(12)
    ]


def _ready_state(
    redis_client: Redis, keys: EngineKeys, tenant: str
) -> tuple[list[str], str | None, list[str]]:
    ready: list[str] = redis_client.lrange(keys.ready(tenant), 0, -1)
    ring: list[str] = redis_client.lrange(keys.ready_tenants, 0, -1)
    return sorted(ready), redis_client.get(keys.drain_tickets), ring


def test_one_script_makes_the_same_scopes_ready_as_two(
    redis_client: Redis, keys: BucketKeys, make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twelve events over six scopes, cap 5: each scope once on its tenant's ready list, 5 tickets, 5
    messages, with no READY_PUSH call; the two-step path (no ready queue) ends in the same state."""
    states = []
    pushes: list[Any] = []
    monkeypatch.setattr(FairQueue, "_push_all", _recording(pushes, FairQueue._push_all))
    for ready in (True, False):
        settings = make_settings(key_prefix=f"{keys.prefix}{int(ready)}:")
        store = EventStore(redis_client, settings)
        broker = Broker()
        emitter = _emitter(store, broker, ready=ready)
        results = emitter.enqueue([emitter.validate(e) for e in _events("p")])
        assert len(pushes) == (0 if ready else 1)  # READY_PUSH's own round trip only on the two-step path
        assert [r.status for r in results] == ["accepted"] * 12
        assert broker.sent == [DRAIN_NEXT_TASK] * 5
        ready_list, tickets, ring = _ready_state(redis_client, store.keys, DEFAULT_TENANT)
        assert tickets == "5" and ring == [DEFAULT_TENANT]
        states.append([ref.split(":", 2)[-1] for ref in ready_list])
        assert len(ready_list) == 6
    assert states[0] == states[1]


def _recording(calls: list[Any], push_all: Any) -> Any:
    def record(self: FairQueue, refs: Any) -> int:
        calls.append(list(refs))
        return int(push_all(self, refs))

    return record


def test_a_refused_batch_pushes_nothing(redis_client: Redis, make_settings: SettingsFactory) -> None:
    """A batch over a scope's inbox limit is refused whole (429 at the door): no event, no ready scope, no
    ticket, no message."""
    store = EventStore(redis_client, make_settings(max_inbox_depth=2))
    broker = Broker()
    emitter = _emitter(store, broker, ready=True)
    emitter.enforce_limits = True
    events = [
        {"sourceType": "bot.message.merged", "sourceId": f"o{i}", "scopeKey": "topic:o", "payload": {}}
        for i in range(3)
    ]
    with pytest.raises(OverLimit):
        emitter.enqueue([emitter.validate(e) for e in events])
    assert not redis_client.exists(store.keys.ready(DEFAULT_TENANT), store.keys.drain_tickets)
    assert (
        broker.sent == [] and redis_client.llen(store.keys.for_tenant(DEFAULT_TENANT).inbox("topic:o")) == 0
    )


def test_another_tenants_enqueue_pushes_onto_that_tenants_ready_list(
    redis_client: Redis, make_settings: SettingsFactory
) -> None:
    """Another tenant's events (the tenant travels in each prepared event) push that tenant's scope refs onto
    that tenant's list, through the one emitter of the process."""
    store = EventStore(redis_client, make_settings())
    emitter = _emitter(store, Broker(), ready=True)
    event = {"sourceType": "bot.message.merged", "sourceId": "t1", "scopeKey": "topic:t", "payload": {}}
    emitter.enqueue([emitter.validate(event, tenant="acme")])
    assert redis_client.lrange(store.keys.ready("acme"), 0, -1) == ["acme/topic:t"]
    assert not redis_client.exists(store.keys.ready(DEFAULT_TENANT))


def test_a_scope_already_scheduled_or_paused_is_not_pushed_again(
    redis_client: Redis, keys: BucketKeys, make_settings: SettingsFactory
) -> None:
    """A second enqueue to a scope that waits for its drain pushes nothing and sends nothing; a paused
    scope's event waits in its inbox, off the ready lists."""
    store = EventStore(redis_client, make_settings())
    broker = Broker()
    emitter = _emitter(store, broker, ready=True)
    first = {"sourceType": "bot.message.merged", "sourceId": "a1", "scopeKey": "topic:a", "payload": {}}
    emitter.enqueue([emitter.validate(first)])
    emitter.enqueue([emitter.validate({**first, "sourceId": "a2"})])
    home = store.keys.for_tenant(DEFAULT_TENANT)
    redis_client.hset(home.for_scope("topic:b").runs("paused"), "topic:b", "1")
    paused = {**first, "sourceId": "b1", "scopeKey": "topic:b"}
    assert emitter.enqueue([emitter.validate(paused)])[0].status == "accepted"
    assert redis_client.lrange(store.keys.ready(DEFAULT_TENANT), 0, -1) == [home.scope_ref("topic:a")]
    assert broker.sent == [DRAIN_NEXT_TASK]
    assert redis_client.llen(home.inbox("topic:b")) == 1


def test_a_broker_that_is_down_gives_the_tickets_back_and_keeps_the_events(
    redis_client: Redis, make_settings: SettingsFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """The events are stored and their scopes ready; the unsent messages' tickets are given back (so the
    next enqueue, or the sweep, sends), and the caller hears accepted, not an error."""
    store = EventStore(redis_client, make_settings())
    broker = Broker(down=True)
    emitter = _emitter(store, broker, ready=True)
    events = [
        {"sourceType": "bot.message.merged", "sourceId": f"d{i}", "scopeKey": f"topic:d{i}"} for i in range(3)
    ]
    results = emitter.enqueue([emitter.validate({**e, "payload": {}}) for e in events])
    assert [r.status for r in results] == ["accepted"] * 3
    assert redis_client.llen(store.keys.ready(DEFAULT_TENANT)) == 3
    assert not redis_client.exists(store.keys.drain_tickets)
    assert "not sent" in caplog.text
