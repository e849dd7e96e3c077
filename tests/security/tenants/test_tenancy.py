"""Tenants in the engine, on a real Redis and real ``celery worker`` processes: one tenant's events, dedupe
records, scopes and limits never touch another's, and a flood from one tenant does not starve another."""

from __future__ import annotations

from typing import Any

import pytest
from redis import Redis

from producers import Producer
from tests.conftest import wait_for
from tests.support.tenants import as_tenant
from worker.core.errors import OverLimit
from worker.keys.layout import BucketKeys

pytestmark = pytest.mark.integration

NOOP = "test.noop"  # admitted (extra source type), handled by no policy: the cheapest real run


def _event(source_id: str, scope: str, **payload: Any) -> dict[str, Any]:
    return {"sourceType": NOOP, "sourceId": source_id, "scopeKey": scope, "payload": payload}


def _done(producer: Producer, event_ids: list[str]) -> int:
    pipe = producer.store.client.pipeline(transaction=False)
    for event_id in event_ids:
        pipe.hget(producer.keys.for_bucket(0).event(event_id), "state")
    return sum(1 for state in pipe.execute() if state == "done")


def test_pre_squatting_another_tenants_next_source_id_does_not_affect_it(
    make_settings: Any, start_worker: Any
) -> None:
    """Tenant B sends tenant A's next sourceId first: A's real event is still accepted and runs."""
    settings = make_settings(extra_source_types=[NOOP])
    producer = Producer(settings)
    tenant_a, tenant_b = as_tenant(producer, "tenant-a"), as_tenant(producer, "tenant-b")
    squat = tenant_b.enqueue(_event("msg_next", "topic:shared"))
    real = tenant_a.enqueue(_event("msg_next", "topic:shared"))
    assert (squat.status, real.status) == ("accepted", "accepted")
    assert squat.event_id != real.event_id
    start_worker(settings)
    wait_for(lambda: _done(tenant_a, [real.event_id]) == 1, what="tenant A's event to run")
    assert tenant_a.status(real.event_id)["duplicates"] == 0  # type: ignore[index]
    assert tenant_a.status(squat.event_id) is None  # B's event does not exist for A
    assert tenant_b.enqueue(_event("msg_next", "topic:shared")).status == "duplicate"  # B dedupes its own


def test_every_key_a_tenant_writes_is_under_its_own_prefix(
    make_settings: Any, start_worker: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """Events, scopes, leases, fences, lanes, chains of tenant B live under ``t:tenant-b:``; A's are not touched."""
    settings = make_settings(extra_source_types=[NOOP])
    producer = Producer(settings)
    tenant_b = as_tenant(producer, "tenant-b")
    ids = [tenant_b.enqueue(_event(f"e{i}", f"topic:t{i % 3}")).event_id for i in range(6)]
    start_worker(settings)
    wait_for(lambda: _done(tenant_b, ids) == 6, what="tenant B's events")
    written = [str(k) for k in redis_client.scan_iter(match=keys.all_pattern)]
    own_b = keys.for_tenant("tenant-b").home_prefix
    tenant_keys = [k for k in written if k.startswith(f"{keys.prefix}t:")]
    assert tenant_keys and all(k.startswith(own_b) for k in tenant_keys)
    assert not [k for k in written if k.startswith(keys.for_tenant("tenant-a").home_prefix)]


def test_inbox_and_tenant_limits_refuse_a_whole_batch_before_writing(
    make_settings: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """Past a scope's inbox depth or the tenant's queued total: OverLimit, and nothing of the batch stored."""
    settings = make_settings(extra_source_types=[NOOP], max_inbox_depth=3, tenant_max_queued=5)
    producer = Producer(settings, tenant="tenant-a")
    producer.enqueue_many([_event(f"a{i}", "topic:deep") for i in range(3)])
    with pytest.raises(OverLimit) as inbox:
        producer.enqueue_many([_event("ok-1", "topic:other"), _event("a3", "topic:deep")])
    assert inbox.value.what == "inbox" and "topic:deep" in inbox.value.message
    assert producer.status(producer.validate(_event("ok-1", "topic:other")).event_id) is None  # none stored
    producer.enqueue_many([_event("b0", "topic:b0"), _event("b1", "topic:b1")])  # 5 queued now
    with pytest.raises(OverLimit) as tenant:
        producer.enqueue(_event("b2", "topic:b2"))
    assert tenant.value.what == "tenant"
    other = Producer(settings, tenant="tenant-b")  # another tenant's quota is its own
    assert other.enqueue(_event("b2", "topic:b2")).status == "accepted"


def _done_at(producer: Producer, event_ids: list[str]) -> list[int | None]:
    """Each event's ``doneAt`` (ms, stamped by its commit), None while it is not done."""
    pipe = producer.store.client.pipeline(transaction=False)
    for event_id in event_ids:
        pipe.hmget(producer.keys.for_bucket(0).event(event_id), "state", "doneAt")
    return [int(at) if state == "done" and at else None for state, at in pipe.execute()]


def _flood_then_trickle(
    settings: Any, start_worker: Any, *, a_events: int, a_scopes: int, b_events: int
) -> tuple[int, int]:
    """Tenant A queues its backlog first, then B its events; workers start after both. Returns (A's events
    committed before B's last one, A's total), read from the commits' own ``doneAt`` stamps once every event is
    done, so how fast this process looks does not count (a test that counted A's done events when it saw B's
    finish measured its own polling under load, not the order the workers kept)."""
    producer = Producer(settings)
    tenant_a, tenant_b = as_tenant(producer, "tenant-a"), as_tenant(producer, "tenant-b")
    a_ids: list[str] = []
    backlog = [_event(f"a{i}", f"topic:a{i % a_scopes}") for i in range(a_events)]
    for start in range(0, len(backlog), 1000):
        a_ids += [r.event_id for r in tenant_a.enqueue_many(backlog[start : start + 1000])]
    b_ids = [tenant_b.enqueue(_event(f"b{i}", f"topic:b{i}")).event_id for i in range(b_events)]
    start_worker(settings, concurrency=2)
    wait_for(lambda: _done(tenant_b, b_ids) == b_events, timeout_s=240, what="tenant B's events")
    wait_for(lambda: _done(tenant_a, a_ids) == len(a_ids), timeout_s=240, what="tenant A's events")
    b_last = max(at for at in _done_at(tenant_b, b_ids) if at is not None)
    a_before = sum(1 for at in _done_at(tenant_a, a_ids) if at is not None and at < b_last)
    return a_before, len(a_ids)


def test_fair_share_serves_a_small_tenant_while_a_flood_waits(make_settings: Any, start_worker: Any) -> None:
    """A's 5,000 events (in 500 scopes) are queued first; B's 20 all finish while over half of A's still wait."""
    settings = make_settings(extra_source_types=[NOOP])
    a_done, a_total = _flood_then_trickle(settings, start_worker, a_events=5000, a_scopes=500, b_events=20)
    assert a_total == 5000
    assert a_done < a_total / 2, f"{a_done} of tenant A's events committed before tenant B's 20 had"


def test_without_fair_share_the_flood_goes_first(make_settings: Any, start_worker: Any) -> None:
    """The control: in the broker's arrival order, B waits behind A's whole backlog (so the test above can fail)."""
    settings = make_settings(extra_source_types=[NOOP], fair_share=False)
    a_done, a_total = _flood_then_trickle(settings, start_worker, a_events=600, a_scopes=200, b_events=5)
    assert a_done > a_total / 2, f"only {a_done} of {a_total} ran first: this control no longer discriminates"


def test_a_tenants_event_rate_answers_429_for_the_whole_batch(make_settings: Any) -> None:
    """Over the tenant's events/s: 429 with Retry-After, nothing of that request stored; another tenant
    still sends."""
    from fastapi.testclient import TestClient

    from producers.http.app import create_web_app

    boot = {"Authorization": "Bearer bootstrap-key-for-tenant-rates-0123"}
    settings = make_settings(
        bootstrap_key="bootstrap-key-for-tenant-rates-0123",
        auth_cache_s=0,
        rate_limit_per_s=0,
        tenant_events_per_s=3,
        extra_source_types=[NOOP],
    )
    with TestClient(create_web_app(settings)) as client:
        keys = {
            t: {
                "Authorization": "Bearer "
                + client.post("/v1/keys", json={"tenant": t, "role": "ingest"}, headers=boot).json()["key"]
            }
            for t in ("tenant-a", "tenant-b")
        }
        batch = {"events": [_event(f"r{i}", "topic:r") for i in range(3)]}
        assert client.post("/v1/events", json=batch, headers=keys["tenant-a"]).status_code == 202
        refused = client.post(
            "/v1/events", json={"events": [_event("r9", "topic:r")]}, headers=keys["tenant-a"]
        )
        assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
        assert refused.json()["error"]["code"] == "tenant_rate_limited"
        assert client.post("/v1/events", json=batch, headers=keys["tenant-b"]).status_code == 202
        producer = Producer(settings, tenant="tenant-a")
        assert producer.status(producer.validate(_event("r9", "topic:r")).event_id) is None
