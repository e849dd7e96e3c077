"""One tenant's open receipt streams, counted across every web process (``AGENT_SIGNAL_TENANT_MAX_STREAMS``).

The per-process caps (producers/http/streams/feed.py) cannot see the other replicas, and a tenant's many credentials (an
``operate`` key mints a user token per user) each get their own per-credential cap. So each open stream also
holds a slot in the tenant's ``open-streams`` zset (``Keys.open_streams``): member = this process's id and a
counter, score = when the slot's lease ends (ms, Redis's clock). A slot is taken by one script that first drops
lapsed leases, then refuses when the tenant already holds ``max_streams`` (:class:`TenantStreamsFull`, answered
429 ``too_many_streams``); each process renews its slots every ``lease_renew_interval_s`` for ``lease_ttl_s``
(the scope lease's settings: the same trade-off), in one script per tenant; a closed stream gives its slot back
at once. A process that crashes stops renewing, so its slots lapse within ``lease_ttl_s``: the count survives
crashes without anyone cleaning up. A renewal adds a slot again when it is missing (a Redis restart, or a take
that dropped it as lapsed while this process could not renew), so a stream never runs uncounted: giving a slot
back takes it out of the held set first and removes it only after any renewal in flight, under one lock, so a
closed stream's slot is never added again.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import uuid
from typing import Any

from redis.asyncio import Redis as AsyncRedis

from worker.keys.layout import Keys
from worker.settings import Settings
from worker.store.calls import Slot, StreamRenew, StreamTake
from worker.store.loader import load_script
from worker.store.server.client import async_redis_from_settings

__all__ = ["StreamSlots", "TenantStreamsFull"]

log = logging.getLogger(__name__)


class TenantStreamsFull(Exception):
    """The tenant already holds ``max_streams`` open streams across the web processes."""


class StreamSlots:
    """This process's slots in its tenants' open-streams counts (see the module docstring)."""

    def __init__(self, settings: Settings, max_streams: int) -> None:
        self.settings = settings
        self.max_streams = max_streams
        self.lease_ms = int(settings.lease_ttl_s * 1000)
        self._process = uuid.uuid4().hex[:12]
        self._counter = itertools.count()
        self._held: dict[str, set[str]] = {}  # tenant -> this process's members
        self._client: AsyncRedis | None = None
        self._scripts: tuple[Any, Any] | None = None
        self._renewer: asyncio.Task[None] | None = None
        self._renewing = asyncio.Lock()  # a give-back's ZREM waits for a renewal in flight (which may re-add)

    @property
    def enabled(self) -> bool:
        return self.max_streams > 0

    def _redis(self) -> tuple[AsyncRedis, Any, Any]:
        if self._client is None or self._scripts is None:
            self._client = async_redis_from_settings(self.settings)
            self._scripts = (
                self._client.register_script(load_script(StreamTake.SCRIPT)),
                self._client.register_script(load_script(StreamRenew.SCRIPT)),
            )
        return self._client, *self._scripts

    def _key(self, tenant: str) -> str:
        return Keys(self.settings.key_prefix, tenant).open_streams

    async def take(self, tenant: str) -> str:
        """A slot of ``tenant``'s (its member id); TenantStreamsFull at the maximum; RedisError as raised."""
        client, take, _ = self._redis()
        member = f"{self._process}:{next(self._counter)}"
        call = StreamTake(self._key(tenant), member, self.max_streams, self.lease_ms)
        taken, open_streams = (int(x) for x in await take(keys=call.keys(), args=call.args(), client=client))
        if not taken:
            raise TenantStreamsFull(
                f"this tenant already holds {open_streams} open streams (the limit, "
                f"AGENT_SIGNAL_TENANT_MAX_STREAMS={self.max_streams}); close one or retry later"
            )
        self._held.setdefault(tenant, set()).add(member)
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.get_running_loop().create_task(self._renew_forever(), name="stream-slots")
        return member

    async def give_back(self, tenant: str, member: str) -> None:
        """Free the slot now (best effort: a slot that cannot be removed lapses with its lease)."""
        held = self._held.get(tenant)
        if held is not None:
            held.discard(member)
            if not held:
                del self._held[tenant]
        try:
            client = self._redis()[0]
            async with self._renewing:  # after a renewal that still named it, never before
                await client.zrem(self._key(tenant), member)
        except Exception as exc:  # the store is down or full: the lease lapses instead
            log.warning("stream slot not given back (%s); it lapses with its lease", type(exc).__name__)

    async def _renew_forever(self) -> None:
        interval_s = self.settings.lease_renew_interval_s
        while self._held:
            await asyncio.sleep(interval_s)
            client, _, renew = self._redis()
            for tenant in list(self._held):
                async with self._renewing:
                    members = self._held.get(tenant)  # read under the lock: a slot given back is not renewed
                    if not members:
                        continue
                    try:
                        call = StreamRenew(
                            self._key(tenant), self.lease_ms, [Slot(m) for m in sorted(members)]
                        )
                        await renew(keys=call.keys(), args=call.args(), client=client)
                    except Exception as exc:  # next interval tries again; the lease outlives two misses
                        log.warning("stream slots of a tenant not renewed (%s)", type(exc).__name__)

    async def aclose(self) -> None:
        """Stop renewing and give every slot back; close the client."""
        task, self._renewer = self._renewer, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for tenant, members in list(self._held.items()):
            for member in list(members):
                await self.give_back(tenant, member)
        if self._client is not None:
            await self._client.aclose()
            self._client, self._scripts = None, None
