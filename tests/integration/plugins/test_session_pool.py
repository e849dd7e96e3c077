"""A session's function-state update does not hold its connection while it takes another (sessions/function_store.py
``FunctionStore.update``), on a real Redis.

An update WATCHes the session's document on one connection of the process's pool, and a growing update reads its
owner's and tenant's stored-bytes quota. That read took a second connection while the first was held: with as many
updates at once as the pool has connections (20 signals on one session in one web process, in CI), every update
held one and waited for another, and all of them failed ``PoolExhausted`` after the pool's timeout."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from redis import BlockingConnectionPool, Redis

from sessions.function_store import FunctionStore
from sessions.runtime import SessionRuntime
from sessions.store import SessionLimits
from worker.keys.layout import Keys

pytestmark = [pytest.mark.integration]

POOL = 2  # connections, and updates at once


def test_as_many_growing_updates_as_connections_all_commit(
    redis_url: str, prefix: str, redis_client: Redis
) -> None:
    """Each update's first try waits at a barrier inside its WATCH, so all of them hold a connection at once: the
    quota read that follows must not need another."""
    pool = BlockingConnectionPool.from_url(redis_url, max_connections=POOL, timeout=3, decode_responses=True)
    client = Redis(connection_pool=pool)
    limits = SessionLimits(max_user_bytes=1_000_000, max_tenant_bytes=1_000_000_000)
    store = FunctionStore(client, Keys(prefix), limits=limits)
    together = threading.Barrier(POOL, timeout=10)
    first_try = threading.local()

    def grow(name: str, runtime: SessionRuntime) -> None:
        if not getattr(first_try, "done", False):
            first_try.done = True
            together.wait()  # every update inside its WATCH, holding its connection
        runtime.artifacts[name] = "x" * 100

    try:
        with ThreadPoolExecutor(POOL) as threads:
            list(threads.map(lambda n: store.update("s-pool", lambda rt: grow(f"a{n}", rt)), range(POOL)))
        stored = store.load("s-pool")
    finally:
        client.close()
        pool.disconnect()
    assert sorted(stored.artifacts) == [f"a{n}" for n in range(POOL)]  # both written, neither lost
