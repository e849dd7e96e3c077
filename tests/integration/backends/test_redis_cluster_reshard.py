"""Adding a master to a real Redis Cluster and moving hash slots to it while clients hold an older view.

redis-py raises ``AttributeError`` on an ASK redirect to a node its client has not seen (redis/redis-py#4015):
the door answered ``500 internal`` and the workers' relay failed. Our clients (worker/store/server/client.py) refresh
their view and retry once, and a node still unknown is a store error: 503 with Retry-After at the door.
``/readyz`` refreshes the view before reading the primaries and names a slot left open; a drain refused while
its scope's slot moves is published again after 1-2 s instead of waiting for the reconcile sweep.

One cluster serves the module and grows in it: the tests run in file order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from redis.crc import key_slot

from producers import Producer
from producers.http.app import create_web_app
from tests.conftest import SettingsFactory, wait_for
from tests.support.redis_cluster import RedisClusterProcesses, hash_tag_in
from worker.settings import Settings
from worker.store.server import safety
from worker.store.server.client import SlotMoving, async_redis_from_settings, redis_from_settings

pytest_plugins = ["tests.support.cluster_fixtures"]
pytestmark = pytest.mark.integration


@pytest.fixture
def cluster_settings(make_settings: SettingsFactory, redis_cluster: RedisClusterProcesses) -> SettingsFactory:
    """The test's settings with the cluster as the state store (the broker stays the test's plain Redis)."""

    broker_url = make_settings().effective_broker_url()

    def make(**overrides: Any) -> Any:
        return make_settings(redis_cluster_url=redis_cluster.url, broker_url=broker_url, **overrides)

    return make


def _event(source_id: str) -> dict[str, Any]:
    return {"sourceType": "test.timeline", "sourceId": source_id, "scopeKey": "topic:reshard", "payload": {}}


def _home_slot(redis_cluster: RedisClusterProcesses, settings: Settings) -> int:
    """The slot of the default tenant's keys (one scope bucket): its events, inboxes and stats."""
    slot = key_slot(Producer(settings).keys.tenant_stats.encode())
    assert redis_cluster.client().cluster_countkeysinslot(slot) > 0
    return slot


@pytest.fixture
def settings(cluster_settings: SettingsFactory) -> Settings:
    return cluster_settings()


@pytest.fixture
def web(settings: Settings) -> Iterator[TestClient]:
    """The door on the cluster, its clients' views loaded by one accepted event."""
    with TestClient(create_web_app(settings, producer=Producer(settings))) as client:
        assert client.post("/v1/events", json={"events": [_event("before")]}).status_code == 202
        yield client


def test_tenant_slot_moving_to_an_unseen_master_answers_503_then_202(
    redis_cluster: RedisClusterProcesses, web: TestClient, settings: Settings
) -> None:
    """A master added after the door loaded its view gets the tenant's home slot: half-way (ASK to a node
    with no slot yet, so a refresh cannot find it) the door answers 503 with Retry-After, not 500; once the
    slot is the new master's, it accepts again."""
    slot = _home_slot(redis_cluster, settings)
    new = redis_cluster.add_master()

    assert redis_cluster.move_slot(slot, new, finish=False) > 0
    moving = web.post("/v1/events", json={"events": [_event("moving")]})
    assert moving.status_code == 503, moving.text
    assert moving.headers["retry-after"] == "5"
    assert moving.json()["error"]["code"] == "store_unavailable"
    assert "the tenant's slot is moving between Redis nodes" in moving.json()["error"]["message"]

    redis_cluster.assign_slot(slot, new)
    assert web.post("/v1/events", json={"events": [_event("moved")]}).status_code == 202


def test_clients_follow_an_ask_to_a_master_they_have_not_seen(
    redis_cluster: RedisClusterProcesses, cluster_settings: SettingsFactory
) -> None:
    """Clients (sync, its pipelines, asyncio) made before a master joined follow an ASK to it once it owns a
    slot elsewhere (what ``rebalance`` leads to): one refresh of their view finds it, the command runs."""
    settings = cluster_settings()
    client, tag = redis_from_settings(settings), hash_tag_in([(0, 16383)], stem="reshard")
    key = f"{settings.key_prefix}{tag}:k"
    client.set(key, "v")

    async def scenario() -> list[Any]:
        aclient = async_redis_from_settings(settings)
        try:
            await aclient.get(key)  # its view loaded, as the door's is
            new = redis_cluster.add_master()
            empty = next(s for s in range(16384) if s != key_slot(key.encode()) and _empty(redis_cluster, s))
            redis_cluster.assign_slot(empty, new)
            assert redis_cluster.move_slot(key_slot(key.encode()), new, finish=False) == 1
            with client.pipeline(transaction=False) as pipe:
                pipe.get(key)
                piped = pipe.execute()
            async with aclient.pipeline() as apipe:  # first: it meets the unseen node itself
                apipe.get(key)
                apiped = await apipe.execute()
            return [piped, client.get(key), apiped, await aclient.get(key)]
        finally:
            await aclient.aclose()

    assert asyncio.run(scenario()) == [["v"], "v", ["v"], "v"]
    redis_cluster.assign_slot(key_slot(key.encode()), redis_cluster.nodes[-1])  # the move, finished
    client.close()


def test_slot_moving_to_a_master_with_no_slot_is_a_store_error(
    redis_cluster: RedisClusterProcesses, cluster_settings: SettingsFactory
) -> None:
    """An ASK to a node that owns no slot yet cannot be found by a refresh: :class:`SlotMoving`, a store
    error, from the sync and the asyncio client."""
    settings = cluster_settings()
    client, tag = redis_from_settings(settings), hash_tag_in([(0, 16383)], stem="reshard-empty")
    key = f"{settings.key_prefix}{tag}:k"
    client.set(key, "v")
    new = redis_cluster.add_master()

    redis_cluster.move_slot(key_slot(key.encode()), new, finish=False)
    with pytest.raises(SlotMoving):
        client.get(key)

    async def read() -> Any:
        aclient = async_redis_from_settings(settings)
        try:
            return await aclient.get(key)
        finally:
            await aclient.aclose()

    with pytest.raises(SlotMoving):
        asyncio.run(read())
    redis_cluster.assign_slot(key_slot(key.encode()), new)
    assert client.get(key) == "v"
    client.close()


def _empty(redis_cluster: RedisClusterProcesses, slot: int) -> bool:
    owner = next(
        m for m in redis_cluster.masters() if any(a <= slot <= b for a, b in redis_cluster.slots_of(m))
    )
    return int(owner.admin().execute_command("CLUSTER", "COUNTKEYSINSLOT", slot)) == 0


def test_readyz_reads_a_master_added_after_the_door_started(
    redis_cluster: RedisClusterProcesses, web: TestClient
) -> None:
    """``/readyz`` refreshes the door's view before reading each primary's configuration: an evicting policy on
    a master that joined after the door loaded its view fails it."""
    new = redis_cluster.add_master()
    empty = next(s for s in range(16384) if _empty(redis_cluster, s))
    redis_cluster.assign_slot(empty, new)
    new.admin().config_set("maxmemory-policy", "allkeys-lru")
    try:
        ready = web.get("/readyz")
    finally:
        new.admin().config_set("maxmemory-policy", "noeviction")

    assert ready.status_code == 503, ready.text
    assert ready.json()["checks"]["eviction"].startswith("error: allkeys-lru")
    assert web.get("/readyz").status_code == 200


def test_readyz_names_a_slot_left_open_and_the_fix(
    redis_cluster: RedisClusterProcesses, web: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slot set MIGRATING/IMPORTING by hand is a ``cluster`` warning while it may still be moving, and
    ``stalled`` once it stood still past ``OPEN_SLOT_STALL_S``, naming the slot and ``redis-cli --cluster fix``;
    closed again, the entry is gone. Still 200: every web process would see it, and one tenant's slot must not
    take every tenant's door out of a load balancer."""
    source, target = redis_cluster.masters()[:2]
    slot = redis_cluster.slots_of(source)[0][0]
    target.admin().execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source.cluster("MYID"))
    source.admin().execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target.cluster("MYID"))
    try:
        moving = web.get("/readyz")
        monkeypatch.setattr(safety, "OPEN_SLOT_STALL_S", 0.0)
        stalled = web.get("/readyz")
    finally:
        for node in (source, target):
            node.admin().execute_command("CLUSTER", "SETSLOT", slot, "STABLE")

    assert moving.status_code == 200, moving.text
    assert moving.json()["checks"]["cluster"].startswith(f"moving: slot {slot} is open (migrating from ")
    assert stalled.status_code == 200, stalled.text
    entry = stalled.json()["checks"]["cluster"]
    assert entry.startswith(
        f"stalled: slot {slot} is open (migrating from {source.address} to {target.address}"
    )
    assert f"redis-cli --cluster fix {source.address}" in entry
    closed = web.get("/readyz")
    assert closed.status_code == 200 and "cluster" not in closed.json()["checks"]


@pytest.mark.timeout(120)
def test_drains_refused_while_the_tenant_slot_moves_run_seconds_after_it_ends(
    redis_cluster: RedisClusterProcesses, cluster_settings: SettingsFactory, start_worker: Any
) -> None:
    """A worker starting while the tenant's home slot is half-moved (its keys split: TRYAGAIN) has its drains
    refused; they are published again after 1-2 s, so the events are done seconds after the move ends, not
    at the reconcile sweep (two minutes away here)."""
    settings = cluster_settings(reconcile_interval_s=120.0)
    producer = Producer(settings)
    events = [_event(f"moving-{i}") | {"scopeKey": f"topic:moving-{i % 4}"} for i in range(8)]
    assert [r.status for r in producer.enqueue_many(events)] == ["accepted"] * 8
    slot = _home_slot(redis_cluster, settings)
    target = next(m for m in redis_cluster.masters() if not _owns(redis_cluster, m, slot))
    source = next(m for m in redis_cluster.masters() if _owns(redis_cluster, m, slot))
    _migrate_some(source, target, slot)

    worker = start_worker(settings, wait=False)
    wait_for(lambda: "store unavailable: drain" in worker.log(), timeout_s=60, what="a refused drain")
    redis_cluster.move_slot(slot, target)  # the rest of the keys, then the slot: the move ends

    wait_for(
        lambda: producer.store.stats(producer.keys).get("done", 0) == 8,
        timeout_s=20,
        what="the 8 events done soon after the move",
    )


def _owns(redis_cluster: RedisClusterProcesses, master: Any, slot: int) -> bool:
    return any(a <= slot <= b for a, b in redis_cluster.slots_of(master))


def _migrate_some(source: Any, target: Any, slot: int) -> None:
    """Open ``slot`` from ``source`` to ``target`` and move one key of it: the rest stay, so a script over the
    slot's keys finds them split (TRYAGAIN)."""
    target.admin().execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source.cluster("MYID"))
    source.admin().execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target.cluster("MYID"))
    keys = source.admin().execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1000)
    source.admin().execute_command(
        "MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "REPLACE", "KEYS", *keys[::2]
    )
