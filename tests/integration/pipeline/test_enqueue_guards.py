"""An event admitted only while another is no tombstone (``PreparedEvent.unless_erased``, an admission hook's
:class:`worker.plugin.UnlessErased`), on a real Redis: the enqueue scripts (ENQUEUE, and ENQUEUE_PUSH where the
door makes scopes ready in the same script) refuse the batch before any write when the guard is a tombstone, and
the door's emitter answers that event as the hook asked and stores the rest."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from redis import Redis

from producers import Producer
from worker.core.errors import GuardErased
from worker.keys.layout import BucketKeys
from worker.plugin import PreparedEvent, UnlessErased

pytestmark = pytest.mark.integration


def _event(producer: Producer, source_id: str, scope: str = "topic:guards") -> PreparedEvent:
    event = {
        "sourceType": "agent.user.message",
        "sourceId": source_id,
        "scopeKey": scope,
        "userId": "u-guard",
    }
    return producer.emitter.validate({**event, "payload": {"message": "hello"}})


@pytest.mark.parametrize("push", [False, True], ids=["enqueue", "enqueue_push"])
def test_a_guard_erased_refuses_the_batch_before_any_write(
    make_settings: Any, redis_client: Redis, keys: BucketKeys, push: bool
) -> None:
    producer = Producer(make_settings())
    try:
        origin, other = _event(producer, "origin"), _event(producer, "other")
        producer.store.enqueue_many([origin])
        guarded = replace(_event(producer, "guarded"), unless_erased=origin.event_id)
        batch = [other, guarded]

        def store() -> Any:
            if not push:
                return producer.store.enqueue_many(batch)
            ready = producer.fair.admission_push(producer.store.client, "default")
            assert ready is not None
            return producer.store.enqueue_and_push(batch, ready, enforce_limits=False)[0]

        redis_client.hset(keys.event(origin.event_id), "erasedAt", "1")
        with pytest.raises(GuardErased) as refused:
            store()
        assert refused.value.event_id == guarded.event_id
        assert not redis_client.exists(keys.event(other.event_id), keys.event(guarded.event_id))

        redis_client.hdel(keys.event(origin.event_id), "erasedAt")  # the guard stands: both are stored
        assert [o.status for o in store()] == ["accepted", "accepted"]
    finally:
        producer.close()


def test_the_emitter_answers_the_guarded_event_and_stores_the_rest(
    make_settings: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """A hook answers UnlessErased for the second event; the erasure lands after the hook's look: that event is
    answered the hook's status, not stored, and the batch's other events are stored."""
    producer = Producer(make_settings())
    try:
        origin = _event(producer, "origin-2")
        producer.store.enqueue_many([origin])

        def hook(events: Any) -> dict[int, str | UnlessErased]:
            redis_client.hset(
                keys.event(origin.event_id), "erasedAt", "1"
            )  # after the look, before the write
            return {1: UnlessErased(origin.event_id, "gone")}

        producer.emitter.admission = (hook,)
        first, second = _event(producer, "kept-2"), _event(producer, "guarded-2")
        results = producer.emitter.enqueue([first, second])
        assert [r.status for r in results] == ["accepted", "gone"]
        assert redis_client.exists(keys.event(first.event_id))
        assert not redis_client.exists(keys.event(second.event_id))
    finally:
        producer.close()
