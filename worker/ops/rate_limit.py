"""Rate limits: token buckets in Redis, checked and charged by one Lua script (one round trip).

A bucket (hash ``tokens``, ``at``) holds up to ``burst`` tokens (the rate, at least 1) and refills at
``rate_per_s``; each request takes one. A request is charged to two buckets at once: its credential's
(``Keys.rate_bucket(id)``, ``AGENT_SIGNAL_RATE_LIMIT_PER_S``) and its tenant's (``Keys.tenant_rate_bucket``,
``AGENT_SIGNAL_TENANT_RATE_LIMIT_PER_S``: every key of the tenant and every user token they minted share it),
in the same script: a token is taken from both or from neither, and the reply says which bucket refused. Both
keys carry the tenant as hash tag, so on a Redis Cluster they are in one slot. Time is the Redis server's
(``TIME``), so web replicas with skewed clocks share one bucket fairly. An idle bucket expires once it would be
full again. A refused request learns how long until the next token (``Retry-After``, whole seconds, ≥ 1).

The web app calls :meth:`RateLimiter.acheck` with its asyncio client. It takes up to :attr:`RateLimiter.chunk`
tokens per round trip (a tenth of a second's worth of the smaller rate, at most 100) and spends them in the
process for up to :data:`ALLOWANCE_HOLD_S`: a round trip costs about a tenth of a single-event ingest, so
asking once per request would cost ~10% of ingest throughput (docs/decisions.md "Credentials"). The limit stays
conservative: a token is taken from the shared buckets before it is spent, and tokens a replica holds and does
not use in time are dropped. At rates under 10/s the chunk is 1 (every request asks Redis).
:meth:`RateLimiter.check` (synchronous, one token per call) is for tests and tools; :meth:`RateLimiter.take`
takes a batch's worth at once (the tenant's events/s quota).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Literal

from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from worker.keys.layout import Keys

__all__ = ["RateDecision", "RateLimiter"]

# KEYS: one bucket per key (the credential's first, then the tenant's). ARGV: want, whole ('1': all or
# nothing), then rate and burst per key. -> {granted, wait_ms, index of the bucket that refused (0: none)}
TOKEN_BUCKETS = """
local want = tonumber(ARGV[1])
local whole = ARGV[2] == '1'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local tokens, rates, bursts = {}, {}, {}
local granted, wait_ms, refused = want, 0, 0
for i, key in ipairs(KEYS) do
  local rate, burst = tonumber(ARGV[1 + 2 * i]), tonumber(ARGV[2 + 2 * i])
  local state = redis.call('HMGET', key, 'tokens', 'at')
  local have, at = tonumber(state[1]), tonumber(state[2])
  if have == nil or at == nil then
    have, at = burst, now
  end
  have = math.min(burst, have + math.max(0, now - at) * rate / 1000)
  tokens[i], rates[i], bursts[i] = have, rate, burst
  -- all or nothing (a batch of events): at most a full bucket is asked, so a big batch can still pass
  local need = 1
  if whole then need = math.min(want, burst) end
  if have < need then
    local wait = math.ceil((need - have) * 1000 / rate)
    if wait > wait_ms then wait_ms, refused = wait, i end
    granted = 0
  elseif not whole then
    granted = math.min(granted, math.floor(have))
  end
end
for i, key in ipairs(KEYS) do
  local have = tokens[i]
  if granted > 0 then
    if whole then have = have - math.min(want, bursts[i]) else have = have - granted end
  end
  redis.call('HSET', key, 'tokens', tostring(have), 'at', tostring(now))
  redis.call('PEXPIRE', key, math.ceil(bursts[i] * 1000 / rates[i]) + 1000)
end
return {granted, wait_ms, refused}
"""


@dataclass(frozen=True, slots=True)
class RateDecision:
    allowed: bool
    retry_after_s: int = 0  # whole seconds until a token is back (≥ 1 when refused)
    refused_by: Literal["credential", "tenant", ""] = ""  # whose bucket was empty


ALLOWANCE_HOLD_S = 1.0  # tokens a process took but did not spend are dropped after this
MAX_CHUNK = 100
MAX_ALLOWANCES = 10_000  # credentials with tokens held in this process (dropped whole past this)


def _burst(rate_per_s: float) -> float:
    return max(1.0, rate_per_s)


class RateLimiter:
    """Token buckets of ``rate_per_s`` per credential id (bursts up to the same number) and, with
    ``tenant_rate_per_s``, one more per tenant charged in the same round trip (either may be None: no bucket)."""

    def __init__(
        self, keys: Keys, rate_per_s: float | None, *, tenant_rate_per_s: float | None = None
    ) -> None:
        rates = [r for r in (rate_per_s, tenant_rate_per_s) if r is not None]
        if not rates or any(r <= 0 for r in rates):
            raise ValueError("rates must be > 0, and one given (a rate of 0 means no limiter at all)")
        self.keys = keys
        self.rate_per_s = rate_per_s
        self.tenant_rate_per_s = tenant_rate_per_s
        self.chunk = max(1, min(MAX_CHUNK, int(min(rates) / 10)))
        self._tails: list[str] = []
        for rate in (rate_per_s, tenant_rate_per_s):
            if rate is not None:
                self._tails += [repr(rate), repr(_burst(rate))]
        self._tenant_keys: dict[str, Keys] = {}
        self._held: dict[str, tuple[int, float]] = {}  # credential -> (tokens held, monotonic deadline)
        self._sync: Any = None  # redis-py Script objects: they keep the SHA and fall back to EVAL
        self._async: Any = None

    def _keys_of(self, tenant: str | None) -> Keys:
        if tenant is None or tenant == self.keys.tenant:
            return self.keys
        keys = self._tenant_keys.get(tenant)
        if keys is None:
            if len(self._tenant_keys) >= MAX_ALLOWANCES:
                self._tenant_keys.clear()
            keys = self._tenant_keys[tenant] = self.keys.for_tenant(tenant)
        return keys

    def _call(
        self, credential_id: str, tenant: str | None, want: int, *, whole: bool = False
    ) -> tuple[list[str], list[str]]:
        k = self._keys_of(tenant)
        keys = [k.rate_bucket(credential_id)] if self.rate_per_s is not None else []
        if self.tenant_rate_per_s is not None:
            keys.append(k.tenant_rate_bucket)
        return keys, [str(want), "1" if whole else "0", *self._tails]

    def _decision(self, reply: Any) -> tuple[int, RateDecision]:
        granted, wait_ms, refused = (int(x) for x in reply)
        if granted:
            return granted, RateDecision(True)
        by: Literal["credential", "tenant"] = "credential"
        if self.rate_per_s is None or refused == 2:
            by = "tenant"
        return 0, RateDecision(False, max(1, math.ceil(wait_ms / 1000)), by)

    def check(self, client: Redis, credential_id: str, tenant: str | None = None) -> RateDecision:
        """Take one token from the shared buckets (no tokens held in the process)."""
        if self._sync is None:
            self._sync = client.register_script(TOKEN_BUCKETS)
        keys, args = self._call(credential_id, tenant, 1)
        return self._decision(self._sync(keys=keys, args=args, client=client))[1]

    def take(self, client: Redis, bucket_id: str, n: int) -> RateDecision:
        """Take ``n`` tokens at once or none (a tenant's batch of events; at most a full bucket is needed)."""
        if self._sync is None:
            self._sync = client.register_script(TOKEN_BUCKETS)
        keys, args = self._call(bucket_id, None, max(1, n), whole=True)
        return self._decision(self._sync(keys=keys, args=args, client=client))[1]

    async def acheck(self, client: AsyncRedis, credential_id: str, tenant: str | None = None) -> RateDecision:
        """Spend a token this process holds, else take up to :attr:`chunk` from the buckets (one round trip)."""
        now = time.monotonic()
        held, deadline = self._held.get(credential_id, (0, 0.0))
        if held > 0 and now < deadline:
            self._held[credential_id] = (held - 1, deadline)
            return RateDecision(True)
        if self._async is None:
            self._async = client.register_script(TOKEN_BUCKETS)
        keys, args = self._call(credential_id, tenant, self.chunk)
        granted, decision = self._decision(await self._async(keys=keys, args=args, client=client))
        if granted > 1:
            if len(self._held) >= MAX_ALLOWANCES:
                self._held.clear()
            held, deadline = self._held.get(credential_id, (0, 0.0))
            held = held if time.monotonic() < deadline else 0
            self._held[credential_id] = (held + granted - 1, time.monotonic() + ALLOWANCE_HOLD_S)
        return decision
