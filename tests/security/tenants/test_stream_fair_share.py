"""A web process's total of receipt streams is shared fairly between tenants.

A trust audit: the total (``AGENT_SIGNAL_MAX_STREAMS``) was first come, first served, so two tenants at their
cap across processes (``AGENT_SIGNAL_TENANT_MAX_STREAMS``) filled a process, and one alone where that cap is off
or above the total: every other tenant's stream there was answered 429. Now, at the total, a tenant holding
fewer streams in the process than another (by two or more) takes the newest stream of the one holding the most,
which ends (its client reconnects and catches up). The feed itself, on a real Redis.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from redis import Redis

from producers.http.streams.feed import Feed, TooManyStreams

pytestmark = pytest.mark.integration


def test_at_the_total_a_tenant_with_fewer_streams_takes_the_newest_of_the_one_with_most(
    make_settings: Any, redis_client: Redis
) -> None:
    prefix = make_settings().key_prefix

    async def scenario() -> None:
        feed = Feed(make_settings(), max_streams=4, max_streams_per_credential=10, eviction_interval_s=0)
        try:
            a = [await feed.listen(f"{prefix}a{i}", "key_a", "tenant-a") for i in range(4)]
            await feed.listen(f"{prefix}b0", "key_b", "tenant-b")
            assert await asyncio.wait_for(a[3].get(), 10) is None  # A's newest ended for B's
            with pytest.raises(TooManyStreams):  # A holds 3 of 4: it takes nobody's
                await feed.listen(f"{prefix}a4", "key_a2", "tenant-a")
            await feed.listen(f"{prefix}b1", "key_b", "tenant-b")  # 3 against 1: A gives one more
            assert await asyncio.wait_for(a[2].get(), 10) is None
            with pytest.raises(TooManyStreams):  # 2 and 2: nobody gives
                await feed.listen(f"{prefix}b2", "key_b", "tenant-b")
            assert feed.open_streams == 4
            for ended in (a[3], a[2]):  # their streams' close does not count them out twice
                await ended.aclose()
            assert feed.open_streams == 4
            redis_client.publish(f"{prefix}a0", "still live")  # A's older streams go on
            assert await asyncio.wait_for(a[0].get(), 10) == "still live"
            for listener in a[:2]:
                await listener.aclose()
            assert feed.open_streams == 2
            await feed.listen(f"{prefix}b2", "key_b", "tenant-b")  # room again: no one is ended for it
        finally:
            await feed.aclose()

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_a_newcomer_refused_its_tenants_slot_ends_nobody_and_a_tenant_ends_one_stream_per_interval(
    make_settings: Any,
) -> None:
    """A review: the newest stream of the tenant holding most was ended before the newcomer took its tenant's
    slot across processes, so a tenant at that cap, refused every time, ended another tenant's stream per request.
    Now nobody is ended for a refused newcomer, and a tenant ends at most one stream per interval."""
    prefix = make_settings().key_prefix

    async def scenario() -> None:
        settings = make_settings()
        elsewhere = Feed(settings, max_streams=10, max_streams_per_credential=10, tenant_max_streams=4)
        feed = Feed(settings, max_streams=4, max_streams_per_credential=10, tenant_max_streams=4)
        try:
            for i in range(4):  # B's streams, its cap, in another process
                await elsewhere.listen(f"{prefix}b-other{i}", "key_b", "tenant-b")
            x = [await feed.listen(f"{prefix}x{i}", "key_x", "tenant-x") for i in range(4)]
            with pytest.raises(TooManyStreams, match="this tenant already holds"):
                await feed.listen(f"{prefix}b0", "key_b", "tenant-b")
            assert feed.open_streams == 4 and not any(listener.evicted for listener in x)
            await feed.listen(f"{prefix}c0", "key_c", "tenant-c")  # X holds 4, C none: X gives its newest
            assert x[3].evicted and not any(listener.evicted for listener in x[:3])
            with pytest.raises(TooManyStreams, match="the limit"):  # 3 against 1, but C ended one just now
                await feed.listen(f"{prefix}c1", "key_c", "tenant-c")
            assert feed.open_streams == 4 and not x[2].evicted
        finally:
            await feed.aclose()
            await elsewhere.aclose()

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_newcomers_of_one_tenant_arriving_together_end_one_stream(make_settings: Any) -> None:
    """A review: the interval was noted when a stream ended, after the newcomer's await for its tenant's slot, so
    newcomers of one tenant waiting at once each ended a stream. Now it is noted at the promise."""
    prefix = make_settings().key_prefix

    async def scenario() -> None:
        feed = Feed(make_settings(), max_streams=6, max_streams_per_credential=10, tenant_max_streams=10)
        try:
            a = [await feed.listen(f"{prefix}a{i}", "key_a", "tenant-a") for i in range(6)]
            results = await asyncio.gather(
                feed.listen(f"{prefix}c0", "key_c", "tenant-c"),
                feed.listen(f"{prefix}c1", "key_c", "tenant-c"),
                return_exceptions=True,
            )
            assert sorted(type(r).__name__ for r in results) == ["Listener", "TooManyStreams"]
            assert [listener.evicted for listener in a] == [False] * 5 + [True]
            assert feed.open_streams == 6
        finally:
            await feed.aclose()

    asyncio.run(asyncio.wait_for(scenario(), 60))


class _HeldSlots:
    """A tenant-slots stand-in whose take for ``held`` waits until released (a Redis that stalls), and which
    then refuses it; every other tenant's take is granted at once."""

    enabled = True

    def __init__(self, held: str) -> None:
        self.held = held
        self.release = asyncio.Event()
        self.waiting = asyncio.Event()
        self.count = 0

    async def take(self, tenant: str) -> str:
        self.count += 1
        if tenant == self.held and self.count == 7:  # the first newcomer of the held tenant
            self.waiting.set()
            await self.release.wait()
            from producers.http.streams.slots import TenantStreamsFull

            raise TenantStreamsFull("this tenant already holds its streams (the limit)")
        return f"m{self.count}"

    async def give_back(self, tenant: str, member: str) -> None:
        return None

    async def aclose(self) -> None:
        return None


def test_a_refused_newcomer_clears_only_its_own_eviction_note(make_settings: Any) -> None:
    """A review: a newcomer whose slot took longer than the interval, then was refused, cleared the note a later
    promise of its tenant had made, and the tenant ended another stream at once."""
    prefix = make_settings().key_prefix

    async def scenario() -> None:
        feed = Feed(make_settings(), max_streams=6, max_streams_per_credential=10, eviction_interval_s=0.05)
        slots = _HeldSlots("tenant-a")
        feed.slots = slots  # type: ignore[assignment]
        try:
            b = [await feed.listen(f"{prefix}b{i}", "key_b", "tenant-b") for i in range(6)]
            first = asyncio.ensure_future(feed.listen(f"{prefix}a0", "key_a", "tenant-a"))
            await slots.waiting.wait()  # promised B's newest, its slot stalled
            while time.monotonic() - feed._last_eviction_s["tenant-a"] < feed.eviction_interval_s:
                await asyncio.sleep(
                    0.01
                )  # the interval passes (a wait for time, not for something not to happen)
            await feed.listen(f"{prefix}a1", "key_a", "tenant-a")  # a later promise of A's, noted
            note = feed._last_eviction_s["tenant-a"]
            slots.release.set()
            with pytest.raises(TooManyStreams):
                await first
            assert feed._last_eviction_s.get("tenant-a") == note  # the later note stands
            assert sum(listener.evicted for listener in b) == 1 and feed.open_streams == 6
        finally:
            await feed.aclose()

    asyncio.run(asyncio.wait_for(scenario(), 60))
