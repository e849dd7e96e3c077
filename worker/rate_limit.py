"""Per-credential rate limits: a token bucket in Redis, checked and charged by one Lua script (one round trip).

A credential's bucket (``Keys.rate_bucket(id)``: hash ``tokens``, ``at``) holds up to ``burst`` tokens (the
rate, at least 1) and refills at ``rate_per_s``; each request takes one. Time is the Redis server's
(``TIME``), so web replicas with skewed clocks share one bucket fairly. An idle bucket expires once it would be
full again. A refused request learns how long until the next token (``Retry-After``, whole seconds, ≥ 1).

The web app calls :meth:`RateLimiter.acheck` with its asyncio client. It takes up to :attr:`RateLimiter.chunk`
tokens per round trip (a tenth of a second's worth, at most 100) and spends them in the process for up to
:data:`ALLOWANCE_HOLD_S`: a round trip costs about a tenth of a single-event ingest, so asking once per request
would cost ~10% of ingest throughput (docs/decisions.md "Credentials"). The limit stays conservative: a
token is taken from the shared bucket before it is spent, and tokens a replica holds and does not use in time
are dropped. At rates under 10/s the chunk is 1 (every request asks Redis). :meth:`RateLimiter.check`
(synchronous, one token per call) is for tests and tools.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from worker.keys import Keys

__all__ = ["RateDecision", "RateLimiter"]

TOKEN_BUCKET = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(state[1])
local at = tonumber(state[2])
if tokens == nil or at == nil then
  tokens = burst
  at = now
end
tokens = math.min(burst, tokens + math.max(0, now - at) * rate / 1000)
local granted = math.min(want, math.floor(tokens))
local wait_ms = 0
if ARGV[4] == '1' then
  -- all or nothing (a batch of events): at most a full bucket is asked, so a big batch can still pass
  local need = math.min(want, burst)
  if tokens >= need then
    granted = want
    tokens = tokens - need
  else
    granted = 0
    wait_ms = math.ceil((need - tokens) * 1000 / rate)
  end
elseif granted >= 1 then
  tokens = tokens - granted
else
  granted = 0
  wait_ms = math.ceil((1 - tokens) * 1000 / rate)
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst * 1000 / rate) + 1000)
return {granted, wait_ms}
"""


@dataclass(frozen=True, slots=True)
class RateDecision:
    allowed: bool
    retry_after_s: int = 0  # whole seconds until a token is back (≥ 1 when refused)


ALLOWANCE_HOLD_S = 1.0  # tokens a process took but did not spend are dropped after this
MAX_CHUNK = 100
MAX_ALLOWANCES = 10_000  # credentials with tokens held in this process (dropped whole past this)


def _refused(wait_ms: int) -> RateDecision:
    return RateDecision(False, max(1, math.ceil(wait_ms / 1000)))


class RateLimiter:
    """Token buckets of ``rate_per_s`` (bursts up to the same number) per credential id."""

    def __init__(self, keys: Keys, rate_per_s: float) -> None:
        if rate_per_s <= 0:
            raise ValueError("rate_per_s must be > 0 (a rate of 0 means no limiter at all)")
        self.keys = keys
        self.rate_per_s = rate_per_s
        self.burst = max(1.0, rate_per_s)
        self.chunk = max(1, min(MAX_CHUNK, int(rate_per_s / 10)))
        self._held: dict[str, tuple[int, float]] = {}  # credential -> (tokens held, monotonic deadline)
        self._sync: Any = None  # redis-py Script objects: they keep the SHA and fall back to EVAL
        self._async: Any = None

    def _args(self, credential_id: str, want: int, *, whole: bool = False) -> tuple[list[str], list[str]]:
        args = [repr(self.rate_per_s), repr(self.burst), str(want), "1" if whole else "0"]
        return [self.keys.rate_bucket(credential_id)], args

    def check(self, client: Redis, credential_id: str) -> RateDecision:
        """Take one token from the shared bucket (no tokens held in the process)."""
        if self._sync is None:
            self._sync = client.register_script(TOKEN_BUCKET)
        keys, args = self._args(credential_id, 1)
        granted, wait_ms = (int(x) for x in self._sync(keys=keys, args=args, client=client))
        return RateDecision(True) if granted else _refused(wait_ms)

    def take(self, client: Redis, bucket_id: str, n: int) -> RateDecision:
        """Take ``n`` tokens at once or none (a tenant's batch of events; at most a full bucket is needed)."""
        if self._sync is None:
            self._sync = client.register_script(TOKEN_BUCKET)
        keys, args = self._args(bucket_id, max(1, n), whole=True)
        granted, wait_ms = (int(x) for x in self._sync(keys=keys, args=args, client=client))
        return RateDecision(True) if granted else _refused(wait_ms)

    async def acheck(self, client: AsyncRedis, credential_id: str) -> RateDecision:
        """Spend a token this process holds, else take up to :attr:`chunk` from the bucket (one round trip)."""
        now = time.monotonic()
        held, deadline = self._held.get(credential_id, (0, 0.0))
        if held > 0 and now < deadline:
            self._held[credential_id] = (held - 1, deadline)
            return RateDecision(True)
        if self._async is None:
            self._async = client.register_script(TOKEN_BUCKET)
        keys, args = self._args(credential_id, self.chunk)
        granted, wait_ms = (int(x) for x in await self._async(keys=keys, args=args, client=client))
        if not granted:
            return _refused(wait_ms)
        if granted > 1:
            if len(self._held) >= MAX_ALLOWANCES:
                self._held.clear()
            held, deadline = self._held.get(credential_id, (0, 0.0))
            held = held if time.monotonic() < deadline else 0
            self._held[credential_id] = (held + granted - 1, time.monotonic() + ALLOWANCE_HOLD_S)
        return RateDecision(True)
