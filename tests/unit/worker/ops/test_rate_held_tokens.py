"""Tokens the web's rate limiter took in a chunk and holds in the process (worker/ops/rate_limit.py
``RateLimiter.acheck``): a request the buckets refused spends one of them, even when its refusal is read before
the grant that brought them. Each request's round trip is on its own connection, so a loaded event loop may read
the replies in another order than Redis sent them: under load, 50 requests at once against a burst of 100 had 40
refused (tests/security/door/test_credentials.py). The client here answers in that order on purpose; nothing
waits on a clock."""

from __future__ import annotations

import asyncio
from typing import Any

from worker.keys.layout import Keys
from worker.ops.rate_limit import RateLimiter


class _GrantReadLast:
    """An asyncio client whose bucket script grants its first call ``grant`` tokens and refuses every other
    call (its reply: granted, ms until a token, which bucket refused); the grant's reply is handed back only
    once every refusal's has been."""

    def __init__(self, calls: int, grant: int) -> None:
        self.calls, self.grant = calls, grant
        self.asked = 0
        self.refused = 0
        self.refusals_read: asyncio.Event | None = None

    def register_script(self, _source: str) -> Any:
        return self.run

    async def run(self, keys: list[str], args: list[str], client: Any) -> list[int]:
        if self.refusals_read is None:
            self.refusals_read = asyncio.Event()
        self.asked += 1
        if self.asked == 1 and self.grant:
            await self.refusals_read.wait()
            return [self.grant, 0, 0]
        self.refused += 1
        if self.refused == self.calls - (1 if self.grant else 0):
            self.refusals_read.set()
        return [0, 100, 1]


def _at_once(limiter: RateLimiter, client: _GrantReadLast, count: int) -> list[bool]:
    async def run() -> list[bool]:
        decisions = await asyncio.gather(*(limiter.acheck(client, "key_z") for _ in range(count)))  # type: ignore[arg-type]
        return [d.allowed for d in decisions]

    return asyncio.run(run())


def test_a_refusal_read_before_the_grant_spends_the_tokens_it_brought() -> None:
    limiter = RateLimiter(Keys("t:"), 100.0)  # chunks of 10
    client = _GrantReadLast(calls=10, grant=10)
    assert _at_once(limiter, client, 10) == [True] * 10  # the grant's 10: its own and the 9 refused
    assert client.asked == 10 and not limiter._in_flight


def test_refusals_with_no_grant_in_flight_stay_refused() -> None:
    limiter = RateLimiter(Keys("t:"), 100.0)
    client = _GrantReadLast(calls=5, grant=0)
    assert _at_once(limiter, client, 5) == [False] * 5
    assert not limiter._in_flight


def test_only_the_tokens_granted_are_spent() -> None:
    """A grant of 3 pays for its own request and two refused ones: the rest stay refused."""
    limiter = RateLimiter(Keys("t:"), 100.0)
    assert sorted(_at_once(limiter, _GrantReadLast(calls=6, grant=3), 6)) == [False] * 3 + [True] * 3
