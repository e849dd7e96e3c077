"""The pipeline's invariants on a real three-master Redis Cluster (with a replica each) as the state store and
RabbitMQ as the broker: the *same* tests as tests/integration/pipeline/test_pipeline.py (dedupe storm, per-scope order,
SIGKILL exactly-once, crash loops, fencing), collected again here with the store fixtures pointed at the
cluster. Then a master is killed mid-run and its replica takes over: with ``AGENT_SIGNAL_WAIT_REPLICAS=1``
nothing acknowledged is lost and no effect is applied twice."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from redis import Redis
from redis.crc import key_slot

from producers import Producer
from tests.conftest import SettingsFactory, wait_for
from tests.integration.pipeline.test_pipeline import TestCrashes as TestClusterCrashes
from tests.integration.pipeline.test_pipeline import TestDedupe as TestClusterDedupe
from tests.integration.pipeline.test_pipeline import TestFencing as TestClusterFencing
from tests.integration.pipeline.test_pipeline import TestScopeSerialization as TestClusterScopeSerialization
from tests.support.redis_cluster import RedisClusterProcesses
from worker.keys.layout import BucketKeys
from worker.settings import Settings

pytest_plugins = ["tests.support.cluster_fixtures"]
pytestmark = pytest.mark.integration

__all__ = [
    "TestClusterCrashes",
    "TestClusterDedupe",
    "TestClusterFencing",
    "TestClusterScopeSerialization",
]


@pytest.fixture
def redis_client(redis_cluster: RedisClusterProcesses, prefix: str) -> Iterator[Redis]:
    """The cluster, as the tests' store client (the engine types its cluster client as Redis too)."""
    client: Any = redis_cluster.client()
    yield client
    for key in list(client.scan_iter(match=f"{prefix}*", count=1000)):
        client.delete(key)
    client.close()


@pytest.fixture
def make_settings(
    redis_url: str, prefix: str, redis_cluster: RedisClusterProcesses, rabbitmq_url: str
) -> SettingsFactory:
    """Settings of the cluster (state) and the private RabbitMQ vhost (broker), fast timings as elsewhere."""
    return cluster_settings(redis_url, prefix, redis_cluster, rabbitmq_url)


def cluster_settings(
    redis_url: str, prefix: str, redis_cluster: RedisClusterProcesses, rabbitmq_url: str, **defaults: Any
) -> SettingsFactory:
    """A settings factory for the cluster and the vhost, with ``defaults`` under the test's own overrides."""
    from tests.conftest import FAST

    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "redis_url": redis_url,
            "redis_cluster_url": redis_cluster.url,
            "broker_url": rabbitmq_url,
            "key_prefix": prefix,
            "queue_name": prefix.rstrip(":"),
            "env": "test",
            "allowed_hosts": ["testserver"],
            **FAST,
            **defaults,
        }
        values.update(overrides)
        return Settings(**values)

    return make


def _event(i: int, scope: str, counter: str) -> dict[str, Any]:
    return {
        "sourceType": "test.counter",
        "sourceId": f"fo-{i}",
        "scopeKey": scope,
        "payload": {"counterKey": counter, "seq": i},
    }


def test_tenants_spread_across_masters(redis_cluster: RedisClusterProcesses, prefix: str) -> None:
    """Each tenant's keys share one slot (its hash tag); different tenants land on different masters."""
    slots = {key_slot(BucketKeys(prefix, f"t{i}").bucket_prefix.encode()) for i in range(30)}
    owners = {
        m.port
        for m in redis_cluster.masters()
        for first, last in redis_cluster.slots_of(m)
        if any(first <= s <= last for s in slots)
    }
    assert len(owners) == 3
    k = BucketKeys(prefix, "acme")
    one_tenant = {
        k.inbox("s"),
        k.event("e"),
        k.dlq,
        k.scopes,
        k.outbox_due,
        k.runs("status", "done"),
        k.stats,
    }
    assert len({key_slot(key.encode()) for key in one_tenant}) == 1


@pytest.mark.timeout(300)
def test_failover_with_wait_loses_nothing_acknowledged(
    redis_cluster: RedisClusterProcesses,
    make_settings: SettingsFactory,
    start_worker: Callable[..., Any],
    redis_client: Redis,
    keys: BucketKeys,
) -> None:
    """Events stream in while workers drain; the master holding the tenant's slot is SIGKILLed and its replica
    promoted. Every event the producer saw acknowledged is there afterwards and ends done, and each one's
    effect (a counter per event) is applied exactly once."""
    # max_attempts: the writes WAIT refuses while the slot has no replica make drains fail, and each failed
    # drain counts an attempt; the crash-loop guard (TestCrashes) must not end an event dead here.
    settings = make_settings(wait_replicas=1, wait_replicas_timeout_ms=1000, max_attempts=50)
    failover_run(redis_cluster, settings, start_worker, redis_client, key_slot(keys.bucket_prefix.encode()))


def failover_run(
    redis_cluster: RedisClusterProcesses,
    settings: Settings,
    start_worker: Callable[..., Any],
    redis_client: Redis,
    slot: int,
) -> None:
    """Stream events over 8 scopes while two worker processes drain them; SIGKILL the master owning
    ``slot``, let its replica take over, restart it; then every acknowledged event must end done with its
    counter (in the tenant's home slot) at exactly 1."""
    start_worker(settings, concurrency=2)
    producer = Producer(settings)
    keys = producer.keys.for_bucket(0)
    owner = next(
        m
        for m in redis_cluster.masters()
        for first, last in redis_cluster.slots_of(m)
        if first <= slot <= last
    )
    acknowledged: list[tuple[str, str]] = []
    refused: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        i = 0
        while not stop.is_set():
            counter = f"{keys.home_prefix}test:fo:{i}"
            try:
                result = producer.enqueue(_event(i, f"topic:fo-{i % 8}", counter))
                acknowledged.append((result.event_id, counter))
            except Exception as exc:  # the door's 503 during the failover: not acknowledged, nothing promised
                refused.append(f"{type(exc).__name__}: {exc}")
            i += 1

    thread = threading.Thread(target=produce)
    thread.start()
    wait_for(lambda: len(acknowledged) >= 60, what="events acknowledged before the kill")
    redis_cluster.kill_master(owner)
    redis_cluster.wait_failover(owner)
    # The promoted replica has no replica of its own: WAIT 1 refuses every write until the old master is back
    # (as its replica), which is what an operator restores. Then more events are acknowledged.
    redis_cluster.restart(owner)
    after_restart = len(acknowledged)
    wait_for(lambda: len(acknowledged) >= after_restart + 40, timeout_s=60, what="events after the failover")
    stop.set()
    thread.join(timeout=60)
    report = f"{len(acknowledged)} acknowledged, {len(refused)} refused during the failover"
    print(report)

    _wait_all_done(producer, redis_client, acknowledged, report)
    _assert_each_applied_once(redis_client, acknowledged, report)
    producer.close()


def _wait_all_done(
    producer: Producer, redis_client: Redis, acknowledged: list[tuple[str, str]], report: str
) -> None:
    """Wait until every acknowledged event is done and no outbox or journal record is due in any bucket; on a
    timeout, say what was last seen (statuses, records due, and each stuck scope's inbox, lease and ticket)."""
    keys = producer.keys.for_bucket(0)
    seen: dict[str, Any] = {}

    def all_done() -> bool:
        records = [producer.status(event_id) for event_id, _ in acknowledged]
        seen["statuses"] = Counter("missing" if r is None else r["status"] for r in records)
        seen["outbox due"] = sum(
            redis_client.zcard(k.outbox_due) + redis_client.zcard(k.journal_due) for k in keys.every_bucket()
        )
        stuck = {str(r["scopeKey"]) for r in records if r is not None and r["status"] != "done"}
        seen["stuck scopes"] = {
            s: (
                redis_client.llen(keys.inbox(s)),
                redis_client.get(keys.lease(s)),
                redis_client.get(keys.scheduled(s)),
                s in producer.store.active_scopes(producer.keys),
            )
            for s in sorted(stuck)
        }
        return seen["statuses"] == Counter(done=len(records)) and not seen["outbox due"]

    try:
        wait_for(all_done, timeout_s=120, what=f"every acknowledged event done ({report})")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen: {seen}") from None


def _assert_each_applied_once(redis_client: Redis, acknowledged: list[tuple[str, str]], report: str) -> None:
    """Every acknowledged event's counter is exactly 1: none lost, none applied twice."""
    pipe = redis_client.pipeline(transaction=False)
    for _, counter in acknowledged:
        pipe.get(counter)
    counts = pipe.execute()
    lost = [c for c, n in zip(acknowledged, counts, strict=True) if n is None]
    twice = [c for c, n in zip(acknowledged, counts, strict=True) if n is not None and n != "1"]
    assert not lost and not twice, f"lost {len(lost)}, applied twice {len(twice)} ({report})"
