"""The reconcile sweep ages a scope's scheduled-drain marker by the Redis server's clock (the TTL it was set with,
its value, less its remaining PTTL), not by a time the writer read: a marker written by a web replica whose clock
runs 10 minutes ahead does not delay the repair of a lost drain, nor does one written by a door whose visibility
timeout is longer than the workers'. A marker's age is set through its PTTL, so no test sleeps or reads the wall
clock."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from unittest import mock

import pytest
from redis import Redis

import worker.store.events as store_events
from producers import Producer
from tests.conftest import SettingsFactory
from worker.core.clock import now_ms
from worker.keys.layout import BucketKeys
from worker.ops.scope_control import list_scopes
from worker.runtime.reconcile import reconcile
from worker.settings import Settings
from worker.store.events import marker_ttl_ms

pytestmark = pytest.mark.integration

SKEW_MS = 600_000  # the enqueuing replica's clock is 10 minutes ahead
STALE_AFTER_MS = 4_000
SCOPE = "topic:lost"


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    return make_settings(fair_share=False, push_drain_messages=False)


@pytest.fixture
def producer(settings: Settings) -> Iterator[Producer]:
    made = Producer(settings)
    yield made
    made.close()


def _enqueue(producer: Producer, keys: BucketKeys, *, skew_ms: int) -> str:
    """Store one event of SCOPE from a replica whose clock is ``skew_ms`` off; its drain message is lost (none is
    sent). Returns the scope's marker key."""
    event = {
        "sourceType": "test.counter",
        "sourceId": "x",
        "scopeKey": SCOPE,
        "payload": {"counterKey": f"{keys.bucket_prefix}test:c"},
    }
    with mock.patch.object(store_events, "now_ms", lambda: now_ms() + skew_ms):
        producer.enqueue(event)
    return producer.keys.scheduled(SCOPE)


def _sweep(producer: Producer) -> list[str]:
    sent: list[str] = []

    def publish(refs: Sequence[str], *, waiting: int) -> None:
        sent.extend(refs)

    assert reconcile(producer.store, publish, stale_after_ms=STALE_AFTER_MS) == sent
    return sent


def _age(redis_client: Redis, marker: str, producer: Producer, age_ms: int) -> None:
    """Make the marker ``age_ms`` old by Redis's clock: it has that much less of its TTL left."""
    assert redis_client.pexpire(marker, producer.store.schedule_ttl_ms - age_ms)


def test_a_marker_dated_in_the_future_does_not_delay_the_repair(
    producer: Producer, redis_client: Redis, keys: BucketKeys
) -> None:
    """A marker written 10 minutes ahead that has been there past stale_after gets its scope a drain now."""
    marker = _enqueue(producer, keys, skew_ms=SKEW_MS)
    # its value is the TTL it was set with, not the replica's time (a marker of before held that: aged by PTTL too)
    assert redis_client.get(marker) == str(producer.store.schedule_ttl_ms)
    _age(redis_client, marker, producer, STALE_AFTER_MS + 1)
    assert _sweep(producer) == [f"default/{SCOPE}"]


def test_a_young_marker_dated_in_the_future_is_respected(
    producer: Producer, redis_client: Redis, keys: BucketKeys
) -> None:
    """A marker written 10 minutes ahead but scheduled less than stale_after ago (by Redis) gets no second drain."""
    marker = _enqueue(producer, keys, skew_ms=SKEW_MS)
    _age(redis_client, marker, producer, STALE_AFTER_MS // 2)
    assert _sweep(producer) == []


@pytest.mark.parametrize("skew_ms", [0, -SKEW_MS], ids=["correct clock", "clock behind"])
def test_markers_are_aged_the_same_whatever_the_writers_clock(
    producer: Producer, redis_client: Redis, keys: BucketKeys, skew_ms: int
) -> None:
    """Whatever clock wrote it, a marker younger than stale_after is respected and an older one is repaired."""
    marker = _enqueue(producer, keys, skew_ms=skew_ms)
    _age(redis_client, marker, producer, STALE_AFTER_MS // 2)
    assert _sweep(producer) == []
    _age(redis_client, marker, producer, STALE_AFTER_MS + 1)
    assert _sweep(producer) == [f"default/{SCOPE}"]
    assert _sweep(producer) == []  # the sweep's own marker is fresh: one drain per stale_after


def test_the_scope_listing_ages_the_marker_the_same_way(
    producer: Producer, redis_client: Redis, keys: BucketKeys
) -> None:
    """``GET /v1/scopes?state=stuck`` (worker/ops/scope_control.py): a marker dated 10 minutes ahead that has been
    there longer than a lease is ``stuck``, not ``waiting`` for the skew; a young one is ``waiting``."""
    marker = _enqueue(producer, keys, skew_ms=SKEW_MS)
    lease_ms = int(producer.settings.lease_ttl_s * 1000)
    _age(redis_client, marker, producer, lease_ms // 2)
    assert [s["state"] for s in list_scopes(producer.store, producer.keys)] == ["waiting"]
    _age(redis_client, marker, producer, lease_ms + 1)
    assert [s["state"] for s in list_scopes(producer.store, producer.keys)] == ["stuck"]


def test_the_scope_listing_reads_its_heads_record_a_retry_time_and_an_age(
    producer: Producer, redis_client: Redis, keys: BucketKeys
) -> None:
    """SCOPE_STATES reads the head's record beside the scope's keys: a head waiting for its retry time
    (``notBefore`` ahead) keeps an old marker's scope ``waiting``; once that time has passed it is ``stuck``; its
    ``headAgeMs`` is counted from the record's ``enqueuedAt``."""
    marker = _enqueue(producer, keys, skew_ms=0)
    head = redis_client.lindex(producer.keys.inbox(SCOPE), 0)
    record = producer.keys.for_scope(SCOPE).event(str(head))
    redis_client.hset(record, mapping={"notBefore": now_ms() + 600_000, "enqueuedAt": now_ms() - 5_000})
    _age(redis_client, marker, producer, int(producer.settings.lease_ttl_s * 1000) + 1)
    [row] = list_scopes(producer.store, producer.keys)
    assert row["state"] == "waiting" and row["headAgeMs"] >= 5_000, row
    redis_client.hset(record, "notBefore", now_ms() - 1)
    assert [s["state"] for s in list_scopes(producer.store, producer.keys)] == ["stuck"]


def test_a_marker_of_a_door_with_a_longer_visibility_timeout_is_aged_by_its_own_ttl(
    producer: Producer, make_settings: SettingsFactory, redis_client: Redis, keys: BucketKeys
) -> None:
    """A door whose visibility timeout is twice the workers' sets its markers ``PX`` twice as long. Aged by the
    worker's TTL, such a marker read as scheduled in the future for the difference (an hour with the defaults), and
    a lost drain waited that long for its repair; aged by the TTL it holds, it is repaired after stale_after. The
    scope listing reads it the same way."""
    longer_s = 2 * producer.settings.visibility_timeout_s
    door = Producer(make_settings(fair_share=False, push_drain_messages=False, visibility_timeout_s=longer_s))
    try:
        marker = _enqueue(door, keys, skew_ms=0)
        assert redis_client.get(marker) == str(door.store.schedule_ttl_ms)
        _age(redis_client, marker, door, STALE_AFTER_MS // 2)
        assert _sweep(producer) == []
        _age(redis_client, marker, door, int(producer.settings.lease_ttl_s * 1000) + 1)
        assert [s["state"] for s in list_scopes(producer.store, producer.keys)] == ["stuck"]
        _age(redis_client, marker, door, STALE_AFTER_MS + 1)
        assert _sweep(producer) == [f"default/{SCOPE}"]
    finally:
        door.close()


@pytest.mark.parametrize(
    ("value", "ttl_ms"),
    [
        ("7200000", 7_200_000),
        ("1764000000000", 3_600_000),
        ("0", 3_600_000),
        ("x", 3_600_000),
        (None, 3_600_000),
    ],
    ids=["a TTL", "a time of before", "zero", "not a number", "none"],
)
def test_the_ttl_a_marker_was_set_with(value: str | None, ttl_ms: int) -> None:
    """Its value when that is a TTL; this process's TTL for a marker of before (the writer's time) or no number."""
    assert marker_ttl_ms(value, 3_600_000) == ttl_ms


def test_a_tenant_the_store_refuses_is_skipped_and_the_others_are_swept(
    producer: Producer, redis_client: Redis, keys: BucketKeys, caplog: pytest.LogCaptureFixture
) -> None:
    """A store error reading one tenant (its slot moving between Redis Cluster nodes, as a reshard walk saw: the
    sweep of every tenant failed) skips that tenant this sweep, logged, and the others' stranded scopes get their
    drains."""
    from redis.exceptions import TryAgainError

    marker = _enqueue(producer, keys, skew_ms=0)
    _age(redis_client, marker, producer, STALE_AFTER_MS + 1)
    real = producer.store.scope_refs_of
    redis_client.sadd(producer.keys.tenants, "moving")

    def refs_of(tenant_keys: object) -> list[str]:
        if getattr(tenant_keys, "tenant", None) == "moving":
            raise TryAgainError("Multiple keys request during rehashing of slot")
        return real(tenant_keys)  # type: ignore[arg-type]

    with mock.patch.object(producer.store, "scope_refs_of", refs_of):
        assert _sweep(producer) == [f"default/{SCOPE}"]
    assert (
        "reconcile sweep: tenant moving skipped: the tenant's slot is moving between Redis nodes"
        in caplog.text
    )
