"""Releasing a scope: an emptied inbox is released the same way paused or not, a paused scope with events is
parked with them, and a lone event's drain asks for the pause once (before it takes the head), not again when
its commit finds the inbox empty."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from producers import Producer
from tests.conftest import SettingsFactory
from tests.support.private_redis import private_redis
from worker.ops.scope_control import cancel_event, pause_scope
from worker.runtime.app import build_pipeline
from worker.settings import Settings


def _event(source_id: str, scope: str) -> dict[str, Any]:
    return {
        "sourceType": "bot.message.merged",
        "sourceId": source_id,
        "scopeKey": scope,
        "payload": {"message": "hello", "messageId": source_id},
    }


def _released(client: Redis, producer: Producer, scope: str) -> bool:
    b = producer.keys.for_scope(scope)
    return not any(
        (
            client.exists(b.lease(scope)),
            client.exists(b.scheduled(scope)),
            client.sismember(b.scopes, b.scope_ref(scope)),
        )
    )


def test_a_paused_scope_is_released_empty_or_not(make_settings: SettingsFactory, redis_client: Redis) -> None:
    settings = make_settings()
    producer = Producer(settings)
    try:
        gone = producer.enqueue(_event("gone-1", "topic:paused-empty")).event_id
        held = producer.enqueue(_event("held-1", "topic:paused-held")).event_id
        cancel_event(producer.store, producer.keys, gone)
        redis_client.lpop(
            producer.keys.for_scope("topic:paused-empty").inbox("topic:paused-empty")
        )  # emptied
        for scope in ("topic:paused-empty", "topic:paused-held"):  # scheduled and listed before the pause
            assert not _released(redis_client, producer, scope)
            pause_scope(producer.store, producer.keys, scope)
        pipeline = build_pipeline(settings)
        for scope in ("topic:paused-empty", "topic:paused-held"):
            outcome = pipeline.drain_scope(scope)
            assert (outcome.processed, outcome.next) == (0, "idle")
            assert _released(redis_client, producer, scope)
        inbox = producer.keys.for_scope("topic:paused-held").inbox("topic:paused-held")
        assert redis_client.lrange(inbox, 0, -1) == [held]  # parked with its event, which waits queued
        status = producer.status(held)
        assert status is not None and status["status"] == "queued"
    finally:
        producer.close()


@pytest.mark.parametrize("head", ["cancelled", "cancel requested"])
def test_a_paused_scope_leaves_a_head_the_loop_would_pop_alone(
    head: str, make_settings: SettingsFactory, redis_client: Redis
) -> None:
    """A paused scope is parked before its head is read: a final head (cancelled while queued) is not popped and
    a head whose cancel was asked while it ran is not committed cancelled, nor counted."""
    settings = make_settings()
    producer = Producer(settings)
    scope = f"topic:paused-{head.replace(' ', '-')}"
    try:
        event_id = producer.enqueue(_event(f"{scope}-1", scope)).event_id
        b = producer.keys.for_scope(scope)
        if head == "cancelled":
            cancel_event(producer.store, producer.keys, event_id)
        else:  # its worker died while it ran, after a cancel was asked for it
            redis_client.hset(b.event(event_id), mapping={"state": "processing", "cancelRequested": "1"})
        pause_scope(producer.store, producer.keys, scope)
        record, stats = redis_client.hgetall(b.event(event_id)), producer.store.stats(producer.keys)
        outcome = build_pipeline(settings).drain_scope(scope)
        assert (outcome.processed, outcome.next) == (0, "idle") and _released(redis_client, producer, scope)
        assert redis_client.lrange(b.inbox(scope), 0, -1) == [event_id]
        assert redis_client.hgetall(b.event(event_id)) == record
        assert producer.store.stats(producer.keys) == stats
    finally:
        producer.close()


def test_a_lone_event_asks_for_the_pause_once(tmp_path: Path) -> None:
    with private_redis(tmp_path) as url:  # INFO commandstats: nobody else's commands on this server
        settings = Settings(redis_url=url, key_prefix="rel:", queue_name="rel", env="test")
        producer = Producer(settings)
        client = Redis.from_url(url, decode_responses=True)
        try:
            producer.enqueue(_event("lone-1", "topic:lone"))
            pipeline = build_pipeline(settings)

            def hexists_calls() -> int:
                return int(client.info("commandstats").get("cmdstat_hexists", {}).get("calls", 0))

            # counted server-wide: the drain's Python asks HEXISTS only to look up an action's lane, and this
            # source type's chain runs no action (policies/activity.py stages its write)
            before = hexists_calls()
            outcome = pipeline.drain_scope("topic:lone")
            assert (outcome.processed, outcome.next) == (1, "idle")
            assert hexists_calls() - before == 1  # ACQUIRE's, before its head; none once the inbox emptied
            assert _released(client, producer, "topic:lone")
        finally:
            producer.close()
            client.close()
