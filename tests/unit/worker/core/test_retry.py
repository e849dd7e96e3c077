"""Exponential backoff with full jitter."""

from __future__ import annotations

import random

import pytest

from worker.core.retry import backoff_ms, should_retry


def test_full_jitter_stays_under_the_exponential_ceiling() -> None:
    """Delays are spread over [0, min(cap, base*2^(n-1))]."""
    rng = random.Random(7)
    for attempt, ceiling in [(1, 100), (2, 200), (3, 400), (4, 800), (5, 1000), (30, 1000)]:
        samples = [backoff_ms(attempt, base_ms=100, cap_ms=1000, rng=rng) for _ in range(300)]
        assert 0 <= min(samples) and max(samples) <= ceiling
        assert max(samples) > ceiling * 0.8, "jitter should use the whole range"
        assert min(samples) < ceiling * 0.2


def test_attempt_starts_at_one() -> None:
    """Attempt 0 is a programming error."""
    with pytest.raises(ValueError):
        backoff_ms(0, base_ms=1, cap_ms=1)


def test_should_retry() -> None:
    """Attempts 1..max-1 retry; the last does not."""
    assert [should_retry(n, 3) for n in (1, 2, 3)] == [True, True, False]
