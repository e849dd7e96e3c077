"""Retry backoff: exponential with full jitter (AWS architecture blog's "Full Jitter").

``delay = uniform(0, min(cap, base * 2 ** (attempt - 1)))``. Full jitter spreads retries of many events
that failed together, so a dependency that recovers is not hit by a synchronized wave.
"""

from __future__ import annotations

import random

__all__ = ["backoff_ms", "should_retry"]


def backoff_ms(attempt: int, *, base_ms: int, cap_ms: int, rng: random.Random | None = None) -> int:
    """The delay before attempt ``attempt + 1`` after ``attempt`` failed attempts (attempt >= 1)."""
    if attempt < 1:
        raise ValueError("attempt starts at 1")
    ceiling = min(cap_ms, base_ms * (2 ** min(attempt - 1, 32)))
    return int((rng or random).uniform(0, ceiling))


def should_retry(attempt: int, max_attempts: int) -> bool:
    """True while another attempt is allowed."""
    return attempt < max_attempts
