"""One erasure at a time per tenant (worker/ops/erasure_holds.py), served over real HTTP (``serve_web``).

An audit: 20 concurrent self-erasures each walked the whole keyspace several times (200,000 keys in Redis),
another tenant's ``GET /v1/receipts`` went from 12 ms to 1.8 s p50 and the web process's connection pool ran dry
(503 ``store_unavailable``). Now a tenant's erasure holds the tenant's lock (with a TTL it renews: a crashed
erasure's lock expires), a second ``DELETE /v1/users/…`` of the tenant meanwhile is 429 ``rate_limited`` with
``Retry-After``, and another tenant's erasure runs.

The web process loads :func:`~tests.plugins.erasure_gate.gate` as a plugin: its eraser holds an erasure of a user named ``slow-…`` until the
test lets it go (it marks that it is waiting, then blocks on a list), so "while one runs" is a state, not a race.
The lock itself (:class:`ErasureHolds`) is then taken on its own: a lock released between a refused ``SET NX`` and
the read of its TTL, and a long walk of the keyspace that finds nothing while the erasure holds it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from redis import Redis

from tests.conftest import wait_for
from tests.plugins.erasure_gate import GATE_S, gate_keys
from tests.plugins.erasure_gate import PLUGIN as GATE_PLUGIN
from worker.keys.layout import Keys
from worker.ops import erasure
from worker.ops.erasure_holds import ErasureHolds
from worker.store.events import EventStore
from worker.store.server.client import redis_from_settings

pytestmark = pytest.mark.integration

BOOT = "bootstrap-key-for-one-erasure-per-tenant-0123456789"


def _bearer(credential: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {credential}"}


@pytest.fixture
def http(make_settings: Any, serve_web: Any) -> Iterator[httpx.Client]:
    plugins = ["tests.support.policies:bundle", GATE_PLUGIN]
    _, url = serve_web(make_settings(bootstrap_key=BOOT, rate_limit_per_s=0, plugins=plugins))
    with httpx.Client(base_url=url, timeout=GATE_S + 30) as client:
        yield client


def _operator(http: httpx.Client, tenant: str) -> dict[str, str]:
    made = http.post("/v1/keys", json={"tenant": tenant, "role": "operate"}, headers=_bearer(BOOT))
    assert made.status_code == 201, made.text
    return _bearer(made.json()["key"])


def test_a_second_erasure_of_a_tenant_is_refused_while_one_runs_and_another_tenants_runs(
    http: httpx.Client, redis_client: Redis, prefix: str
) -> None:
    """While acme's erasure of slow-1 waits at the gate: acme's erasure of bob is 429 ``rate_limited`` with
    ``Retry-After`` and a message naming the running erasure, beta's erasure of bob is 200, and acme's lock has
    a TTL (a crashed erasure's lock expires). Once slow-1's is done, acme's erasure of bob runs."""
    acme, beta = _operator(http, "acme"), _operator(http, "beta")
    keys = Keys(prefix).for_tenant("acme")
    waiting, go = gate_keys(keys, "slow-1")
    with ThreadPoolExecutor(max_workers=1) as pool:
        first = pool.submit(http.delete, "/v1/users/slow-1", headers=acme)
        try:
            wait_for(lambda: redis_client.exists(waiting) or first.done(), what="the erasure at the gate")
            assert not first.done(), first.result().text

            second = http.delete("/v1/users/bob", headers=acme)
            assert second.status_code == 429, second.text
            error = second.json()["error"]
            assert error["code"] == "rate_limited" and "erasure of this tenant is running" in error["message"]
            assert int(second.headers["retry-after"]) >= 1
            assert 0 < redis_client.pttl(keys.erasure_lock)

            other = http.delete("/v1/users/bob", headers=beta)
            assert other.status_code == 200 and other.json()["userId"] == "bob", other.text
        finally:
            redis_client.rpush(go, "go")
        done = first.result()
    assert done.status_code == 200 and done.json()["userId"] == "slow-1", done.text
    assert not redis_client.exists(keys.erasure_lock)
    after = http.delete("/v1/users/bob", headers=acme)
    assert after.status_code == 200, after.text


@pytest.fixture
def store(make_settings: Any) -> Iterator[EventStore]:
    settings = make_settings()
    store = EventStore(redis_from_settings(settings), settings)
    yield store
    store.client.close()


def test_a_lock_released_between_a_refused_set_and_its_ttl_read_is_taken(
    store: EventStore, redis_client: Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another erasure's lock refuses the ``SET NX`` and is released before the lock's TTL is read (-2: no key):
    that was a 429 with no erasure running. The ``SET`` is asked once more, and the lock is this erasure's."""
    keys = Keys(prefix).for_tenant("acme")
    redis_client.set(keys.erasure_lock, "erasure|another", px=60_000)
    pttl = store.client.pttl

    def released_first(name: str) -> Any:
        redis_client.delete(name)  # the other erasure ends between our SET and this read
        return pttl(name)

    monkeypatch.setattr(store.client, "pttl", released_first)
    holds = ErasureHolds(store, keys, [])
    holds.lock()
    assert holds.locked and redis_client.get(keys.erasure_lock) == holds.token
    holds.unlock()
    assert not redis_client.exists(keys.erasure_lock)


def test_a_long_walk_that_finds_nothing_keeps_the_lock(
    store: EventStore, redis_client: Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first SCAN pages of a walk slowed so that they take several lock TTLs, and MATCH finds no key: the
    lock is renewed as the walk goes (at every page, not at every key found) and is still the erasure's."""
    keys = Keys(prefix).for_tenant("acme")
    redis_client.mset({f"{prefix}filler:{n}": "x" for n in range(400)})  # 40 pages to walk, at least
    holds = ErasureHolds(store, keys, [])
    holds.ttl_ms = (
        600  # renewed every 200 ms: a page may stall 350 ms more than it is slowed before it lapses
    )
    holds.lock()
    scan, slowed = store.client.scan, [30]  # 30 pages of 50 ms: the walk takes 2.5 TTLs

    def slow_scan(*args: Any, **kwargs: Any) -> Any:
        if slowed[0]:
            slowed[0] -= 1
            time.sleep(0.05)
        return scan(*args, **kwargs)

    monkeypatch.setattr(store.client, "scan", slow_scan)
    monkeypatch.setattr(erasure, "SCAN_COUNT", 10)
    try:
        assert list(erasure._scan(store, f"{prefix}nothing-matches:*", holds)) == []
        assert slowed == [0], "the walk must outlast the lock's TTL"
        assert holds.locked and redis_client.get(keys.erasure_lock) == holds.token
    finally:
        holds.unlock()
