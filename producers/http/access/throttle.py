"""Failed authentications, throttled per client address before they cost a lookup.

A bearer the process has not verified lately is looked up in Redis (``CredentialStore.verify``: one
``HGETALL``), so a stream of random bearers was a stream of Redis round trips, each in the threadpool. Each
failed authentication now takes a token from its client address's bucket (``AGENT_SIGNAL_AUTH_FAILURE_BURST``
tokens, refilled at ``AGENT_SIGNAL_AUTH_FAILURES_PER_S``); an address whose bucket is empty is answered
``429 rate_limited`` with ``Retry-After`` *instead of* a lookup. A credential that needs no lookup (the
bootstrap key, a key verified within ``AGENT_SIGNAL_AUTH_CACHE_S``) is never refused here, so a valid client
behind the same proxy as an attacker keeps working while its key stays cached.

The buckets live in the process, not in Redis, on purpose: a counter in Redis would cost the round trip the
throttle exists to save. They cover the most recently failing ``MAX_ADDRESSES`` addresses (the least recent is
forgotten first), so memory is bounded whatever the number of addresses. The client address is the one the
server reports (uvicorn takes ``X-Forwarded-For`` only from ``--forwarded-allow-ips``, loopback by default).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable

__all__ = ["MAX_ADDRESSES", "FailedAuthThrottle", "Throttled"]

MAX_ADDRESSES = 10_000


class Throttled(Exception):
    """Too many failed authentications from this address: retry in ``retry_after_s``."""

    def __init__(self, retry_after_s: int) -> None:
        super().__init__(f"too many failed authentications from this address; retry in {retry_after_s}s")
        self.retry_after_s = retry_after_s


class FailedAuthThrottle:
    """Token buckets of failed authentications, one per client address (see the module docstring)."""

    def __init__(
        self,
        rate_per_s: float,
        burst: int,
        *,
        max_addresses: int = MAX_ADDRESSES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate_per_s = rate_per_s
        self.burst = burst
        self.max_addresses = max_addresses
        self.clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # address -> (tokens, at)

    def check(self, address: str | None) -> None:
        """Raise Throttled when ``address`` has no failure left to spend (call it before a lookup)."""
        if self.rate_per_s <= 0 or address is None:
            return
        tokens = self._tokens(address, self.clock())
        if tokens < 1:
            raise Throttled(max(1, math.ceil((1 - tokens) / self.rate_per_s)))

    def failed(self, address: str | None) -> None:
        """One failed authentication from ``address``: take a token from its bucket."""
        if self.rate_per_s <= 0 or address is None:
            return
        now = self.clock()
        self._buckets[address] = (max(self._tokens(address, now) - 1, 0.0), now)
        self._buckets.move_to_end(address)
        while len(self._buckets) > self.max_addresses:
            self._buckets.popitem(last=False)

    def _tokens(self, address: str, now: float) -> float:
        tokens, at = self._buckets.get(address, (float(self.burst), now))
        return min(float(self.burst), tokens + (now - at) * self.rate_per_s)
