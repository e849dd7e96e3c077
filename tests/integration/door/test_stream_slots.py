"""A tenant's open-streams count (producers/http/streams/slots.py) on a real Redis: a slot that vanished while its
stream is still open is added again by the next renewal, and a slot given back stays gone."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis import Redis

from producers.http.streams.slots import StreamSlots
from worker.keys.layout import Keys

pytestmark = pytest.mark.integration

TENANT = "acme"


async def _until(predicate: Any, timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("timed out")
        await asyncio.sleep(0.05)


def test_a_renewal_adds_back_a_slot_that_vanished(make_settings: Any, redis_client: Redis) -> None:
    """Two streams hold slots; the tenant's zset is lost (a Redis restart, a take that dropped them as lapsed):
    the next renewal counts both again. Once one is given back, renewals keep only the other."""
    settings = make_settings()
    key = Keys(settings.key_prefix, TENANT).open_streams

    async def scenario() -> tuple[list[str], list[str], list[str]]:
        slots = StreamSlots(settings, max_streams=10)
        try:
            held = [await slots.take(TENANT), await slots.take(TENANT)]
            redis_client.delete(key)
            await _until(lambda: redis_client.zcard(key) == 2)
            restored = sorted(redis_client.zrange(key, 0, -1))
            await slots.give_back(TENANT, held[0])
            kept = next(m for m in restored if m != held[0])
            for _ in range(2):  # two renewals later (each moves the kept slot's lease end on)
                before = redis_client.zscore(key, kept) or 0
                await _until(lambda before=before: (redis_client.zscore(key, kept) or 0) > before)
            return sorted(held), restored, redis_client.zrange(key, 0, -1)
        finally:
            await slots.aclose()

    held, restored, after = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert restored == held
    assert after == [m for m in held if m in after] and len(after) == 1  # the one given back stayed gone
    assert redis_client.zcard(key) == 0  # aclose gave the last one back
