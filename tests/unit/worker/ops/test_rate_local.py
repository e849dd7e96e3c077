"""The rate limiter's buckets kept in one process (worker/ops/rate_limit.py ``RateLimiter.local``): what charges a
request while a full store refuses the shared buckets' write, at the same rates, with the credential's and the
tenant's buckets each able to refuse. The clock is the test's: nothing here waits."""

from __future__ import annotations

import pytest

import worker.ops.rate_limit as rate_limit
from worker.keys.layout import Keys
from worker.ops.rate_limit import RateDecision, RateLimiter


def test_the_local_buckets_hold_the_rates_and_refill(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr(rate_limit.time, "monotonic", lambda: clock[0])
    limiter = RateLimiter(Keys("t:"), 2.0, tenant_rate_per_s=3.0)
    assert [limiter.local("k1", "acme").allowed for _ in range(3)] == [
        True,
        True,
        False,
    ]  # the key's burst: 2
    assert limiter.local("k1", "acme") == RateDecision(False, 1, "credential")
    assert limiter.local("k2", "acme").allowed  # another key of the tenant: the tenant's third token
    assert limiter.local("k3", "acme") == RateDecision(False, 1, "tenant")
    assert limiter.local("k3", "globex").allowed  # another tenant's bucket
    assert limiter.local("k3", "acme", tenant_bucket=False).allowed  # an operations read: its key's alone
    clock[0] += 0.5  # a token back for k1 (2/s)
    assert limiter.local("k1", "acme", tenant_bucket=False).allowed
    assert not limiter.local("k1", "acme", tenant_bucket=False).allowed
