"""The tenant's events/s quota charges a batch its whole size: a batch past the burst passes when the bucket is
full, leaves a debt, and the next request waits until the debt is paid (its Retry-After counts it). Real Redis;
the bucket's refill is stopped by dating its last refill in the future, so no test reads the wall clock."""

from __future__ import annotations

import math

import pytest
from redis import Redis

from worker.keys.layout import Keys
from worker.ops.rate_limit import RateLimiter

pytestmark = pytest.mark.integration

RATE_PER_S = 100.0  # AGENT_SIGNAL_TENANT_EVENTS_PER_S; the burst is the same number
BATCH = 1000
TENANT = "tenant:acme"
FAR_FUTURE_MS = 10**15  # a last refill dated here: the script adds max(0, now - at) * rate, i.e. nothing


def _bucket(prefix: str) -> str:
    return Keys(prefix).for_tenant("default").rate_bucket(TENANT)


def _stop_refill(redis_client: Redis, bucket: str) -> None:
    redis_client.hset(bucket, "at", str(FAR_FUTURE_MS))


def test_a_batch_past_the_burst_is_charged_its_whole_size(redis_client: Redis, prefix: str) -> None:
    """A full bucket (100) admits a batch of 1000 and is left at -900, kept until it would be full again."""
    limiter = RateLimiter(Keys(prefix), RATE_PER_S)
    assert limiter.take(redis_client, TENANT, BATCH).allowed
    bucket = _bucket(prefix)
    assert float(redis_client.hget(bucket, "tokens") or "nan") == RATE_PER_S - BATCH
    one_burst_ttl_ms = RATE_PER_S * 1000 / RATE_PER_S + 1000  # what it was kept for: the debt then vanished
    assert redis_client.pttl(bucket) > one_burst_ttl_ms  # now ~11 s: the 1000 tokens back at 100/s, + 1 s


def test_the_debt_refuses_the_next_batch_with_the_time_to_pay_it(redis_client: Redis, prefix: str) -> None:
    """After a batch of 1000 at 100/s, the next batch is refused with Retry-After 10 s (900 of debt + 100 needed),
    not the 1 s an empty bucket would give; a single event is refused the same way."""
    limiter = RateLimiter(Keys(prefix), RATE_PER_S)
    assert limiter.take(redis_client, TENANT, BATCH).allowed
    bucket = _bucket(prefix)
    _stop_refill(redis_client, bucket)
    refused = limiter.take(redis_client, TENANT, BATCH)
    assert not refused.allowed
    assert refused.retry_after_s == math.ceil((RATE_PER_S - (RATE_PER_S - BATCH)) / RATE_PER_S)  # 10
    _stop_refill(redis_client, bucket)
    one = limiter.take(redis_client, TENANT, 1)
    assert not one.allowed
    assert one.retry_after_s == math.ceil((1 - (RATE_PER_S - BATCH)) / RATE_PER_S)  # 901 tokens: 10 s
    assert (
        float(redis_client.hget(bucket, "tokens") or "nan") == RATE_PER_S - BATCH
    )  # a refusal costs nothing


def test_a_batch_within_the_burst_is_charged_its_size(redis_client: Redis, prefix: str) -> None:
    """A batch of 40 takes 40 tokens of a full bucket of 100, and one of 70 then waits for 10 more."""
    limiter = RateLimiter(Keys(prefix), RATE_PER_S)
    assert limiter.take(redis_client, TENANT, 40).allowed
    bucket = _bucket(prefix)
    assert float(redis_client.hget(bucket, "tokens") or "nan") == RATE_PER_S - 40
    _stop_refill(redis_client, bucket)
    refused = limiter.take(redis_client, TENANT, 70)
    assert not refused.allowed and refused.retry_after_s == 1
