"""One tenant spread over a real three-master Redis Cluster by scope buckets (``AGENT_SIGNAL_SCOPE_BUCKETS=8``),
RabbitMQ as the broker: the pipeline's invariants (the same tests as tests/integration/pipeline/test_pipeline.py:
dedupe storm, per-scope order, SIGKILL exactly-once, crash loops, fencing), the tenant's work landing on
every master, the journal across slots, and a master killed mid-run with ``AGENT_SIGNAL_WAIT_REPLICAS=1``.
A script touching two slots would fail here (CROSSSLOT), where a single Redis would not notice."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from redis import Redis
from redis.crc import key_slot

from producers import Producer
from tests.conftest import SettingsFactory, wait_for
from tests.integration.backends.test_redis_cluster import cluster_settings, failover_run
from tests.integration.backends.test_redis_cluster import (
    redis_client as redis_client,
)  # the cluster as the store client
from tests.integration.pipeline.test_pipeline import TestCrashes as TestBucketCrashes
from tests.integration.pipeline.test_pipeline import TestDedupe as TestBucketDedupe
from tests.integration.pipeline.test_pipeline import TestFencing as TestBucketFencing
from tests.integration.pipeline.test_pipeline import TestScopeSerialization as TestBucketScopeSerialization
from tests.support.redis_cluster import RedisClusterProcesses
from tests.support.waiting import outbox_settled
from worker.keys.buckets import bucket_of
from worker.keys.layout import BucketKeys, Keys
from worker.ops.runs import RunQuery, discard, list_runs

pytest_plugins = ["tests.support.cluster_fixtures"]
pytestmark = pytest.mark.integration

BUCKETS = 8

__all__ = [
    "TestBucketCrashes",
    "TestBucketDedupe",
    "TestBucketFencing",
    "TestBucketScopeSerialization",
]


@pytest.fixture
def make_settings(
    redis_url: str, prefix: str, redis_cluster: RedisClusterProcesses, rabbitmq_url: str
) -> SettingsFactory:
    """The cluster (state, 8 scope buckets per tenant) and the private RabbitMQ vhost (broker)."""
    return cluster_settings(redis_url, prefix, redis_cluster, rabbitmq_url, scope_buckets=BUCKETS)


def _master_of(redis_cluster: RedisClusterProcesses, slot: int) -> int:
    return next(
        m.port
        for m in redis_cluster.masters()
        for first, last in redis_cluster.slots_of(m)
        if first <= slot <= last
    )


@pytest.mark.timeout(180)
def test_one_tenant_works_on_every_master(
    redis_cluster: RedisClusterProcesses,
    make_settings: SettingsFactory,
    start_worker: Callable[..., Any],
    redis_client: Redis,
) -> None:
    """A burst of one tenant over 24 scopes: its events are stored and committed on all three masters (each
    master holds some of its done events), every scope's keys share one slot, and fanned-out follow-ups
    and home-slot writes (the journal) land once each."""
    settings = make_settings()
    producer = Producer(settings)
    k = producer.keys.for_bucket(0)
    scopes = [f"topic:spread-{i}" for i in range(24)]
    masters = {_master_of(redis_cluster, key_slot(k.for_scope(s).stats.encode())) for s in scopes}
    assert len(masters) == 3, "24 scopes in 8 buckets should reach every master"
    for scope in scopes:
        b = k.for_scope(scope)
        slots = {
            key_slot(x.encode()) for x in (b.inbox(scope), b.lease(scope), b.event("e"), b.dlq, b.scopes)
        }
        assert len(slots) == 1
    for master in redis_cluster.masters():
        master.admin().config_resetstat()
    start_worker(settings, concurrency=2)
    events = [
        {
            "sourceType": "test.fanout",
            "sourceId": f"sp-{i}",
            "scopeKey": scopes[i % 24],
            "payload": {"to": [scopes[(i + 7) % 24]]},
        }
        for i in range(72)
    ]
    results = producer.enqueue_many(events)
    assert [r.status for r in results] == ["accepted"] * 72

    def settled() -> bool:
        return producer.store.stats(producer.keys).get("done", 0) == 144 and outbox_settled(producer.store)

    wait_for(settled, timeout_s=120, what="72 events and 72 follow-ups done, the outbox empty")
    by_master: dict[int, int] = {}
    for bucket in k.every_bucket():
        done = int(redis_client.hget(bucket.stats, "done") or 0)
        port = _master_of(redis_cluster, key_slot(bucket.stats.encode()))
        by_master[port] = by_master.get(port, 0) + done
    assert len(by_master) == 3 and all(by_master.values()), f"done events per master: {by_master}"
    scripts = {
        m.port: int(m.admin().info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))
        for m in redis_cluster.masters()
    }
    print(f"one tenant, {BUCKETS} buckets: done events per master {by_master}, EVALSHA calls {scripts}")
    assert redis_client.get(f"{k.home_prefix}test:fanout-home") == "72"
    counters = [
        redis_client.get(f"{k.home_prefix}test:fanout:{e['sourceId']}:{e['payload']['to'][0]}")
        for e in events
    ]
    assert counters == ["1"] * 72
    crossing = sum(
        bucket_of(e["scopeKey"], BUCKETS) != bucket_of(e["payload"]["to"][0], BUCKETS) for e in events
    )
    assert crossing > 0
    # the ops reads and writes that send scripts in a pipeline: a cluster's cannot load them (an audit found
    # runs listing and DLQ discard answering 503 NoScriptError on every cluster)
    store, tenant = producer.store, producer.keys
    listed, cursor = [], None
    while True:
        page = list_runs(store, tenant, RunQuery(status="done", limit=50, cursor=cursor))
        listed += [e["eventId"] for e in page.events]
        if (cursor := page.cursor) is None:
            break
    assert len(listed) == len(set(listed)) == 144
    assert discard(store, tenant, [r.event_id for r in results[:3]], "not dead") == (
        [],
        [r.event_id for r in results[:3]],
    )
    producer.close()


@pytest.mark.timeout(300)
def test_failover_of_one_bucket_with_wait_loses_nothing_acknowledged(
    redis_cluster: RedisClusterProcesses,
    make_settings: SettingsFactory,
    start_worker: Callable[..., Any],
    redis_client: Redis,
    keys: BucketKeys,
) -> None:
    """The master owning one of the tenant's buckets (scope ``topic:fo-0``'s) is SIGKILLed mid-run and its
    replica promoted, with ``WAIT 1``: every acknowledged event ends done and its effect, journaled to the
    tenant's home slot, is applied exactly once."""
    settings = make_settings(
        wait_replicas=1, wait_replicas_timeout_ms=1000, max_attempts=50
    )  # see test_redis_cluster.py
    bucketed = Keys(keys.prefix, keys.tenant, BUCKETS).for_scope("topic:fo-0")
    failover_run(redis_cluster, settings, start_worker, redis_client, key_slot(bucketed.stats.encode()))
