"""Erasure (``DELETE /v1/users/{userId}``) on a real three-master Redis Cluster, one tenant spread over it by scope
buckets (``AGENT_SIGNAL_SCOPE_BUCKETS=8``). A SCAN there is one cursor per node: an erasure that walked the keyspace
with a single cursor passed the cluster's reply (a dict of cursors) back as the cursor and failed, so every
``DELETE /v1/users/…`` on a cluster was a 503 ``store_unavailable`` (``DataError``). It walks each primary to its
end now, and renews its lock at every page of the walk as it does on a single Redis (a page may hold no matching
key: renewing at each key found is not enough)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from producers.http.app import create_web_app
from tests.conftest import SettingsFactory
from tests.integration.backends.test_redis_cluster import cluster_settings
from tests.integration.backends.test_redis_cluster import (
    redis_client as redis_client,
)  # the cluster as the store client
from tests.security.data.test_erasure import _dump, _mentions
from tests.support.redis_cluster import RedisClusterProcesses
from worker.keys.layout import BucketKeys, Keys
from worker.ops import erasure
from worker.ops.erasure_holds import ErasureHolds
from worker.store.events import EventStore
from worker.store.server.client import redis_from_settings

pytest_plugins = ["tests.support.cluster_fixtures"]
pytestmark = pytest.mark.integration

BUCKETS = 8
GONE, KEPT = "u-cluster-gone", "u-cluster-kept"
MARK = {GONE: "zebra-quartz", KEPT: "otter-basalt"}


@pytest.fixture
def make_settings(
    redis_url: str, prefix: str, redis_cluster: RedisClusterProcesses, rabbitmq_url: str
) -> SettingsFactory:
    """The cluster (state, 8 scope buckets per tenant) and the private RabbitMQ vhost (broker)."""
    return cluster_settings(redis_url, prefix, redis_cluster, rabbitmq_url, scope_buckets=BUCKETS)


@pytest.fixture
def web(make_settings: SettingsFactory) -> Iterator[TestClient]:
    with TestClient(create_web_app(make_settings())) as client:
        yield client


def _populate(web: TestClient, user: str) -> None:
    """Events of the user queued in six topics (no worker runs them), and a session naming the user, with context."""
    for n in range(6):
        event = {
            "sourceType": "test.counter",
            "sourceId": f"{user}-{n}",
            "scopeKey": f"topic:{user}-{n}",
            "userId": user,
            "payload": {"counterKey": f"c-{n}", "note": MARK[user]},
        }
        sent = web.post("/v1/events", json=event)
        assert sent.status_code == 202 and sent.json()["results"][0]["status"] == "accepted", sent.text
    session = f"sess-{user}"
    assert web.put(f"/v1/sessions/{session}", json={"userId": user}).status_code == 200
    body = {"messages": [{"role": "user", "content": f"my {MARK[user]} secret"}], "tokenCount": 7}
    assert web.post(f"/v1/sessions/{session}/context/messages", json=body).status_code == 200


def test_erasing_a_user_on_a_cluster_leaves_nothing_of_them_and_everything_of_others(
    web: TestClient, redis_client: Redis, keys: BucketKeys
) -> None:
    """The user's events (spread over the tenant's buckets, so over every master) and session go, the other
    user's stay, and the answer is 200 with no busy scope (it was 503, ``DataError``, on every cluster)."""
    _populate(web, GONE)
    _populate(web, KEPT)
    before = _dump(redis_client, keys)
    assert _mentions(before, GONE, MARK[GONE]), "the test must start with the user's data present"
    kept_before = sorted(_mentions(before, KEPT, MARK[KEPT]))

    answer = web.delete(f"/v1/users/{GONE}")
    assert answer.status_code == 200, answer.text
    assert answer.json()["busyScopes"] == 0 and answer.json()["removed"]["eventPayloads"] == 6, answer.text

    after = _dump(redis_client, keys)
    assert _mentions(after, GONE, MARK[GONE]) == []
    assert sorted(_mentions(after, KEPT, MARK[KEPT])) == kept_before
    assert web.get(f"/v1/sessions/sess-{KEPT}/context").json()["messages"]


def test_a_long_walk_of_a_cluster_that_finds_nothing_keeps_the_erasures_lock(
    make_settings: SettingsFactory, redis_client: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first SCAN pages slowed so that walking them takes several lock TTLs, and MATCH finds no key: the
    lock is renewed as the walk goes (at every page, not at every key found) and is still the erasure's."""
    settings = make_settings()
    store = EventStore(redis_from_settings(settings), settings)
    tenant = Keys(settings.key_prefix, buckets=BUCKETS)
    for n in range(600):  # pages enough to walk on each node
        redis_client.set(f"{settings.key_prefix}filler:{{f{n}}}", "x")
    holds = ErasureHolds(store, tenant, [])
    # renewed every 200 ms: a page may stall 350 ms more than it is slowed before the lock lapses (at 300 ms, a
    # page 150 ms late, a sleep woken late or a slow round trip on a loaded runner, let it lapse)
    holds.ttl_ms = 600
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
        assert list(erasure._scan(store, f"{settings.key_prefix}nothing-matches:*", holds)) == []
        assert slowed == [0], "the walk must outlast the lock's TTL"
        assert holds.locked and redis_client.get(tenant.erasure_lock) == holds.token
    finally:
        holds.unlock()
        store.client.close()


def test_deleting_a_tenant_on_a_cluster_walks_every_master(
    make_settings: SettingsFactory, redis_client: Redis, keys: BucketKeys, prefix: str
) -> None:
    """A tenant whose scopes spread over the three masters (8 buckets) is deleted whole by the route and a call
    after the settle window (worker/ops/tenant_deletion.py walks each primary with its own cursor); another
    tenant's keys are as they were."""
    from tests.security.tenants.test_tenant_deletion import until_done

    boot = {"Authorization": "Bearer bootstrap-key-for-cluster-tenant-deletion"}
    with TestClient(create_web_app(make_settings(bootstrap_key=boot["Authorization"][7:]))) as web:
        for tenant in ("acme", "beta"):
            made = web.post("/v1/keys", json={"tenant": tenant, "role": "admin"}, headers=boot)
            auth = {"Authorization": f"Bearer {made.json()['key']}"}
            for n in range(12):
                event = {
                    "sourceType": "test.counter",
                    "sourceId": f"{tenant}-{n}",
                    "scopeKey": f"topic:{tenant}-{n}",
                    "userId": f"{tenant}-user",
                    "payload": {"counterKey": f"c-{n}", "note": f"{tenant}-mark"},
                }
                assert web.post("/v1/events", json=event, headers=auth).status_code == 202
        tenants = Keys(prefix, buckets=BUCKETS)
        acme = tenants.for_tenant("acme")
        gone = sorted(
            k for k in redis_client.scan_iter(match=acme.deletion_pattern) if acme.stored_by_tenant(k)
        )
        assert len({redis_client.get_node_from_key(k).name for k in gone}) == 3, "acme must span every master"
        assert any(":ratelimit:{acme}" in k for k in gone), "its rate buckets too"
        beta_before = _dump(redis_client, keys)
        beta_before = [
            (k, v) for k, v in beta_before if "{beta" in k and ":ratelimit:" not in k
        ]  # these expire
        first = web.delete("/v1/tenants/acme", headers=boot)
        assert first.status_code == 200 and first.json()["removed"] == len(gone), first.text
    done = until_done(redis_client, tenants, "acme")
    assert done.state == "done"
    after = _dump(redis_client, keys)
    assert _mentions(after, "acme-mark", "acme-user", "{acme") == []
    assert [(k, v) for k, v in after if "{beta" in k and ":ratelimit:" not in k] == beta_before
