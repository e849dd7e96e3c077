"""A process on a host whose clock is 45 s ahead of the Redis server's works on Redis's (worker/core/clock.py,
worker/store/server/clock_sync.py). A clock walk with libfaketime found, on such a host: a retry's ``notBefore`` 45 s
late for every other worker (its scope held behind it), outbox calls first due late by the skew, a user token
refused the moment it was minted, and ``enqueuedAt`` and receipts dated in the future. Here the host's clock is
moved in-process (``time.time``), Redis's is real; each check fails with the offset left at 0."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from redis import Redis

from tests.support.drains import producer_and_pipeline
from worker.core import clock
from worker.keys.layout import BucketKeys, Keys
from worker.ops.credentials import CredentialStore
from worker.store.server import clock_sync

pytestmark = pytest.mark.integration

AHEAD_MS = 45_000


def _redis_ms(client: Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


@pytest.fixture
def ahead(monkeypatch: pytest.MonkeyPatch, make_settings: Any) -> Iterator[None]:
    """This host's clock 45 s ahead, and the offset measured as a process's first client measures it."""
    real, real_ns = time.time, time.time_ns
    monkeypatch.setattr(time, "time", lambda: real() + AHEAD_MS / 1000)
    monkeypatch.setattr(time, "time_ns", lambda: real_ns() + AHEAD_MS * 10**6)
    before = clock._mono_offset_us
    clock_sync._sync_once(make_settings())
    try:
        yield
    finally:
        clock._mono_offset_us = before


def test_the_measured_offset_puts_the_host_on_redis_clock(ahead: None, redis_client: Redis) -> None:
    assert abs(clock.clock_offset_ms() + AHEAD_MS) < 1_000
    assert abs(clock.now_ms() - _redis_ms(redis_client)) < 1_000
    assert abs(clock.now_us() // 1000 - _redis_ms(redis_client)) < 1_000


def test_a_token_minted_for_30_s_is_valid_on_a_host_ahead(
    ahead: None, redis_client: Redis, keys: BucketKeys
) -> None:
    """Its exp is on Redis's clock; PyJWT checked it on the host's, 45 s ahead: refused at once."""
    store = CredentialStore(redis_client, keys, bootstrap_key="b" * 32, token_secret="s" * 48)
    token, expires_at_ms = store.mint_user_token("default", "u1", ttl_s=30)
    verified = store.verify_user_token(token)
    assert verified is not None and verified.expires_at_ms == expires_at_ms


def test_a_retry_and_the_enqueue_are_dated_on_redis_clock(
    ahead: None, make_settings: Any, redis_client: Redis, prefix: str
) -> None:
    """A handler that fails once: its retry's notBefore is within the backoff cap of Redis's now (it was 45 s
    ahead: another worker on a right clock waited that long), and the event's enqueuedAt is Redis's now."""
    settings = make_settings(plugins=["tests.support.policies:bundle"])
    scope = "topic:skewed"
    with producer_and_pipeline(settings) as (producer, pipeline):
        sent = producer.enqueue(
            {"sourceType": "test.flaky", "sourceId": "f1", "scopeKey": scope, "payload": {"failTimes": 1}}
        )
        pipeline.drain_scope(scope)
        status = producer.status(sent.event_id)
    assert status is not None and status["attempts"] == 1, status
    now = _redis_ms(redis_client)
    event = Keys(prefix, buckets=settings.scope_buckets).for_scope(scope).event(sent.event_id)
    not_before = int(redis_client.hget(event, "notBefore") or 0)
    assert now - 5_000 < not_before <= now + settings.retry_cap_ms, (not_before - now, settings.retry_cap_ms)
    assert now - 5_000 < int(status["enqueuedAt"]) <= now
