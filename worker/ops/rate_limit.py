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

import asyncio
import math
import time
from dataclasses import dataclass
from typing import Any, Literal

from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from worker.core.tenancy import DEFAULT_TENANT
from worker.keys.layout import EngineKeys, Keys
from worker.store.calls import Bucket, TokenBuckets
from worker.store.loader import load_script

__all__ = ["RateDecision", "RateLimiter"]


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
        self, keys: EngineKeys | Keys, rate_per_s: float | None, *, tenant_rate_per_s: float | None = None
    ) -> None:
        rates = [r for r in (rate_per_s, tenant_rate_per_s) if r is not None]
        if not rates or any(r <= 0 for r in rates):
            raise ValueError("rates must be > 0, and one given (a rate of 0 means no limiter at all)")
        self.keys = keys
        self.rate_per_s = rate_per_s
        self.tenant_rate_per_s = tenant_rate_per_s
        self.chunk = max(1, min(MAX_CHUNK, int(min(rates) / 10)))
        self._held: dict[str, tuple[int, float]] = {}  # credential -> (tokens held, monotonic deadline)
        self._local: dict[str, tuple[float, float]] = {}  # bucket -> (tokens, monotonic time): :meth:`local`
        # credential -> its round trips of :meth:`acheck` in flight (each done once its reply has been read)
        self._in_flight: dict[str, set[asyncio.Future[None]]] = {}
        self._sync: Any = (
            None  # redis-py Script objects: they keep the SHA and load the script again on NOSCRIPT
        )
        self._async: Any = None

    def _keys_of(self, tenant: str | None) -> Keys:
        return self.keys.for_tenant(tenant or DEFAULT_TENANT)

    def _call(
        self,
        credential_id: str,
        tenant: str | None,
        want: int,
        *,
        whole: bool = False,
        tenant_bucket: bool = True,
    ) -> TokenBuckets:
        k = self._keys_of(tenant)
        buckets = []
        if self.rate_per_s is not None:
            buckets.append(
                Bucket(k.rate_bucket(credential_id), repr(self.rate_per_s), repr(_burst(self.rate_per_s)))
            )
        if self.tenant_rate_per_s is not None and tenant_bucket:
            rate = self.tenant_rate_per_s
            buckets.append(Bucket(k.tenant_rate_bucket, repr(rate), repr(_burst(rate))))
        return TokenBuckets(want, "1" if whole else "0", buckets)

    def _decision(self, reply: Any) -> tuple[int, RateDecision]:
        granted, wait_ms, refused = (int(x) for x in reply)
        if granted:
            return granted, RateDecision(True)
        by: Literal["credential", "tenant"] = "credential"
        if self.rate_per_s is None or refused == 2:
            by = "tenant"
        return 0, RateDecision(False, max(1, math.ceil(wait_ms / 1000)), by)

    def local(
        self, credential_id: str, tenant: str | None = None, *, tenant_bucket: bool = True
    ) -> RateDecision:
        """One token from buckets kept in this process alone, at the shared buckets' rates: what charges a
        request while those cannot be charged (a full store refuses their write; before, such a request was
        refused 503, or let through uncharged, a review). Each process allows the rate on its own meanwhile."""
        now = time.monotonic()
        buckets: list[tuple[str, float, Literal["credential", "tenant"]]] = []
        if self.rate_per_s is not None:
            buckets.append((f"credential\n{credential_id}", self.rate_per_s, "credential"))
        if self.tenant_rate_per_s is not None and tenant_bucket:
            buckets.append((f"tenant\n{tenant or DEFAULT_TENANT}", self.tenant_rate_per_s, "tenant"))
        if len(self._local) >= MAX_ALLOWANCES:
            self._local.clear()
        levels = []
        for name, rate, by in buckets:
            burst = _burst(rate)
            tokens, at = self._local.get(name, (burst, now))
            tokens = min(burst, tokens + (now - at) * rate)
            if tokens < 1:
                return RateDecision(False, max(1, math.ceil((1 - tokens) / rate)), by)
            levels.append((name, tokens))
        for name, tokens in levels:
            self._local[name] = (tokens - 1, now)
        return RateDecision(True)

    def check(self, client: Redis, credential_id: str, tenant: str | None = None) -> RateDecision:
        """Take one token from the shared buckets (no tokens held in the process)."""
        if self._sync is None:
            self._sync = client.register_script(load_script(TokenBuckets.SCRIPT))
        call = self._call(credential_id, tenant, 1)
        return self._decision(self._sync(keys=call.keys(), args=call.args(), client=client))[1]

    def take(self, client: Redis, bucket_id: str, n: int) -> RateDecision:
        """Take ``n`` tokens at once or none (a tenant's batch of events): admitted once the bucket holds
        ``min(n, burst)``, then charged all ``n`` (the bucket may go below 0; a refusal's ``retry_after_s`` counts
        the debt)."""
        if self._sync is None:
            self._sync = client.register_script(load_script(TokenBuckets.SCRIPT))
        call = self._call(bucket_id, None, max(1, n), whole=True)
        return self._decision(self._sync(keys=call.keys(), args=call.args(), client=client))[1]

    async def acheck(
        self, client: AsyncRedis, credential_id: str, tenant: str | None = None, *, tenant_bucket: bool = True
    ) -> RateDecision:
        """Spend a token this process holds, else take up to :attr:`chunk` from the buckets (one round trip);
        ``tenant_bucket`` False: the credential's bucket alone (the operations reads), whose tokens are held
        apart (tokens taken without the tenant's bucket never pay for a request that needs it)."""
        holder = credential_id if tenant_bucket else f"{credential_id}\nops"
        if self._spend_held(holder):
            return RateDecision(True)
        if self._async is None:
            self._async = client.register_script(load_script(TokenBuckets.SCRIPT))
        call = self._call(credential_id, tenant, self.chunk, tenant_bucket=tenant_bucket)
        asked = asyncio.get_running_loop().create_future()
        in_flight = self._in_flight.setdefault(holder, set())
        in_flight.add(asked)
        try:
            granted, decision = self._decision(
                await self._async(keys=call.keys(), args=call.args(), client=client)
            )
            if granted > 1:
                self._hold(holder, granted - 1)
        finally:
            in_flight.discard(asked)
            if not in_flight and self._in_flight.get(holder) is in_flight:
                del self._in_flight[holder]
            asked.set_result(None)
        if not decision.allowed:
            # Concurrent requests of this credential each took a chunk while this one waited: the bucket may be
            # empty because this process holds its tokens. Spend one of those (a TypeScript walk: 50 requests
            # at once against a burst of 100 had 28 refused, the tokens they needed held here). Their replies
            # may not have been read yet: each is on its own connection, and a loaded event loop may read a refusal
            # Redis sent last before grants it sent first (under load: 10 of 50 allowed). Wait for those replies.
            await self._replies_in_flight(holder)
            if self._spend_held(holder):
                return RateDecision(True)
        return decision

    def _hold(self, holder: str, tokens: int) -> None:
        """Keep ``tokens`` taken from the buckets for ``holder``'s next requests, for :data:`ALLOWANCE_HOLD_S`."""
        if len(self._held) >= MAX_ALLOWANCES:
            self._held.clear()
        held, deadline = self._held.get(holder, (0, 0.0))
        held = held if time.monotonic() < deadline else 0
        self._held[holder] = (held + tokens, time.monotonic() + ALLOWANCE_HOLD_S)

    async def _replies_in_flight(self, holder: str) -> None:
        """Wait until every round trip of ``holder`` in flight now (on this event loop) has been read."""
        loop = asyncio.get_running_loop()
        pending = [f for f in self._in_flight.get(holder, ()) if f.get_loop() is loop]
        if pending:
            await asyncio.wait(pending)

    def _spend_held(self, holder: str) -> bool:
        """Spend one of the tokens this process holds for ``holder`` while they are fresh; False when none."""
        held, deadline = self._held.get(holder, (0, 0.0))
        if held > 0 and time.monotonic() < deadline:
            self._held[holder] = (held - 1, deadline)
            return True
        return False
