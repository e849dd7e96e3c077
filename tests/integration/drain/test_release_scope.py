"""Releasing a scope: an emptied inbox is released the same way paused or not, a paused scope with events is
parked with them, and a lone event's drain asks for the pause once (before it takes the head), not again when
its commit finds the inbox empty."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from redis import Redis

from producers import Producer
from tests.conftest import SettingsFactory
from tests.support.private_redis import private_redis
from worker.ops.scope_control import pause_scope
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
    return not client.exists(b.lease(scope)) and not client.sismember(b.scopes, b.scope_ref(scope))


def test_a_paused_scope_is_released_empty_or_not(make_settings: SettingsFactory, redis_client: Redis) -> None:
    settings = make_settings()
    producer = Producer(settings)
    try:
        for scope in ("topic:paused-empty", "topic:paused-held"):
            pause_scope(producer.store, producer.keys, scope)
        held = producer.enqueue(_event("held-1", "topic:paused-held")).event_id
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

            before = hexists_calls()
            outcome = pipeline.drain_scope("topic:lone")
            assert (outcome.processed, outcome.next) == (1, "idle")
            assert hexists_calls() - before == 1  # ACQUIRE's, before its head; none once the inbox emptied
            assert _released(client, producer, "topic:lone")
        finally:
            producer.close()
            client.close()
