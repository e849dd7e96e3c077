"""The lease at enqueue (issue 29's p99 row): where the enqueue script pushes a drain_next message itself and the
scope it made ready is the only one ready, with no message waiting on the broker's list, the script does that
message's first pop (POP_ACQUIRE's work) and the message carries what it found in its ``grant`` header
(worker/store/lua/enqueue_push.lua, worker/runtime/drain_message.py). Its worker drains that scope without a
round trip first (ScopeLease.adopt). A real Redis; a real worker where a message is consumed."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from producers import Producer
from tests.conftest import Proc, SettingsFactory, wait_for
from worker.core.clock import now_ms
from worker.core.tenancy import DEFAULT_TENANT
from worker.drain.lease import GRANT_CLOCK_SLACK_MS, LeaseGrant, ScopeLease
from worker.keys.layout import Keys
from worker.runtime.drain_message import message_grant
from worker.settings import Settings
from worker.store.replies import HeadCode, RenewCode
from worker.store.scripts import GRANT_MAX_BODY_BYTES, Scripts

pytestmark = pytest.mark.integration


def _event(tag: str, *, message: str = "hi") -> dict[str, Any]:
    return {
        "sourceType": "bot.message.merged",
        "sourceId": tag,
        "scopeKey": f"topic:{tag}",
        "payload": {"message": message, "messageId": tag},
    }


def _messages(redis_client: Redis, settings: Settings) -> list[dict[str, Any]]:
    """The broker's list, oldest first (kombu pushes on the left and pops on the right)."""
    raw = redis_client.lrange(Keys(settings.key_prefix).broker_queue(settings.queue_name), 0, -1)
    return [json.loads(one) for one in reversed(raw)]


def _grants(redis_client: Redis, settings: Settings) -> list[Any]:
    return [m["headers"]["grant"] for m in _messages(redis_client, settings)]


def _state(producer: Producer, event_id: str) -> str:
    return str((producer.status(event_id) or {}).get("status"))


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    # a lease the test outlives: a grant the worker ignored would hold its scope past every wait here
    return make_settings(lease_at_enqueue=True, lease_ttl_s=90.0, lease_renew_interval_s=30.0)


def test_a_lone_enqueue_leases_its_scope_for_its_message(redis_client: Redis, settings: Settings) -> None:
    """One event in an idle engine: its message carries the grant (token, when, POP_ACQUIRE's reply with the
    head taken), the scope's lease holds that token, and the scope is on no ready list any more."""
    producer = Producer(settings)
    event_id = producer.enqueue(_event("g1")).event_id
    [grant] = _grants(redis_client, settings)
    token, granted_ms, popped = grant
    assert abs(granted_ms - now_ms()) < 60_000
    ref, acquired = popped
    assert ref == f"{DEFAULT_TENANT}/topic:g1"
    fence, code, head_id = acquired[0], acquired[1], acquired[2]
    assert fence > 0 and code == HeadCode.TAKEN and head_id == event_id
    keys = producer.store.keys.for_tenant(DEFAULT_TENANT).for_scope("topic:g1")
    assert redis_client.get(keys.lease("topic:g1")) == token
    assert redis_client.llen(producer.store.keys.ready(DEFAULT_TENANT)) == 0
    assert _state(producer, event_id) == "processing"
    producer.close()


def test_no_grant_while_a_message_waits_or_another_scope_is_ready(
    redis_client: Redis, settings: Settings
) -> None:
    """The second lone enqueue finds the first message still on the list: its message carries none and its scope
    waits on the ready list as before. A batch that makes two scopes ready grants neither."""
    producer = Producer(settings)
    producer.enqueue(_event("w1"))
    producer.enqueue(_event("w2"))
    first, second = _grants(redis_client, settings)
    assert first is not None and second is None
    assert redis_client.lrange(producer.store.keys.ready(DEFAULT_TENANT), 0, -1) == [
        f"{DEFAULT_TENANT}/topic:w2"
    ]
    redis_client.delete(Keys(settings.key_prefix).broker_queue(settings.queue_name))
    producer.enqueue_many([_event("w3"), _event("w4")])
    assert _grants(redis_client, settings) == [None, None]
    producer.close()


@pytest.mark.parametrize("ready", ["another tenant's", "this tenant's"])
def test_no_grant_while_another_scope_is_ready(redis_client: Redis, settings: Settings, ready: str) -> None:
    """Fair share stays exact: with any other scope ready (another tenant's in the ring, or this tenant's on its
    list), the lone enqueue's scope waits its turn behind it and its message carries no grant."""
    producer = Producer(settings)
    keys = producer.store.keys
    tenant = "other" if ready == "another tenant's" else DEFAULT_TENANT
    redis_client.rpush(keys.ready(tenant), f"{tenant}/topic:before")
    redis_client.lpush(keys.ready_tenants, tenant)
    producer.enqueue(_event("t1"))
    assert _grants(redis_client, settings) == [None]
    assert f"{DEFAULT_TENANT}/topic:t1" in redis_client.lrange(keys.ready(DEFAULT_TENANT), 0, -1)
    producer.close()


def test_no_grant_for_a_batch_of_two_events_of_one_scope(redis_client: Redis, settings: Settings) -> None:
    """The grant is for one event alone in its scope's inbox (the message carries the head it takes)."""
    producer = Producer(settings)
    producer.enqueue_many([_event("b1"), {**_event("b2"), "scopeKey": "topic:b1"}])
    assert _grants(redis_client, settings) == [None]
    producer.close()


def test_no_grant_when_an_earlier_event_still_waits_in_the_scope(
    redis_client: Redis, make_settings: SettingsFactory
) -> None:
    """A scope whose drain marker ran out (workers down for its whole TTL) while an event waited is made ready by
    its next event: the head the pop would take is the earlier event, which the message must not carry unseen."""
    settings = make_settings(lease_at_enqueue=True)
    producer = Producer(settings.model_copy(update={"lease_at_enqueue": False}))
    producer.enqueue(_event("e1"))
    keys = producer.store.keys
    scope = keys.for_tenant(DEFAULT_TENANT).for_scope("topic:e1")
    redis_client.delete(scope.scheduled("topic:e1"), keys.ready(DEFAULT_TENANT), keys.ready_tenants)
    redis_client.delete(Keys(settings.key_prefix).broker_queue(settings.queue_name), keys.drain_tickets)
    producer.close()
    granting = Producer(settings)
    granting.enqueue({**_event("e2"), "scopeKey": "topic:e1"})
    assert _grants(redis_client, settings) == [None]
    assert redis_client.llen(scope.inbox("topic:e1")) == 2
    granting.close()


def test_a_body_with_lua_escapes_travels_whole(redis_client: Redis, settings: Settings) -> None:
    """The grant is spliced into the message with Lua's gsub, whose replacement reads '%' as an escape: a body
    with '%', '%1', quotes, backslashes and non-ASCII reaches the message as stored."""
    producer = Producer(settings)
    text = 'a 100% "sure" %1 %% \\ \u2028 é ✓ done'
    event_id = producer.enqueue(_event("p1", message=text)).event_id
    [grant] = _grants(redis_client, settings)
    body = grant[2][1][3]
    stored = redis_client.hget(producer.store.locate(producer.keys, event_id).event(event_id), "event")
    assert body == stored and json.loads(body)["payload"]["message"] == text
    producer.close()


@pytest.mark.parametrize("case", ["off", "large body"])
def test_no_grant_when_off_or_for_a_large_body(
    redis_client: Redis, make_settings: SettingsFactory, case: str
) -> None:
    """``lease_at_enqueue`` off (the default), or an event of more than GRANT_MAX_BODY_BYTES (the message would
    carry it): the message carries none, and the scope waits on the ready list."""
    off = case == "off"
    producer = Producer(make_settings() if off else make_settings(lease_at_enqueue=True))
    message = "x" if off else "x" * (GRANT_MAX_BODY_BYTES + 1)
    producer.enqueue(_event("n1", message=message))
    settings = producer.settings
    assert _grants(redis_client, settings) == [None]
    assert redis_client.llen(producer.store.keys.ready(DEFAULT_TENANT)) == 1
    producer.close()


def test_a_worker_drains_a_granted_scope_with_the_grant(
    redis_client: Redis, settings: Settings, start_worker: Callable[..., Proc]
) -> None:
    """A real worker takes the message and drains its scope under the grant. Nothing else could: the scope is on
    no ready list and its lease (90 s) outlives the wait, so a worker that popped instead would find nothing."""
    producer = Producer(settings)
    event_id = producer.enqueue(_event("d1")).event_id
    assert _grants(redis_client, settings)[0] is not None
    start_worker(settings)
    wait_for(lambda: _state(producer, event_id) == "done", timeout_s=60, what="the granted event to be done")
    producer.close()


def test_a_redelivered_message_pops_and_leaves_its_grant(
    redis_client: Redis, settings: Settings, start_worker: Callable[..., Proc]
) -> None:
    """kombu marks a message it puts back ``redelivered``; its grant may be held by the first delivery's drain,
    so the worker pops instead. Here the marked message drains the scope that was ready (the second event's)
    and leaves the granted one to its lease: once both messages retired their tickets, the first event is still
    where the enqueue put it, under the enqueue's token."""
    producer = Producer(settings)
    queue = Keys(settings.key_prefix).broker_queue(settings.queue_name)
    first = producer.enqueue(_event("r1")).event_id
    raw = json.loads(redis_client.rpop(queue) or "")
    token = raw["headers"]["grant"][0]
    raw["headers"]["redelivered"] = True
    raw["properties"]["delivery_info"]["redelivered"] = True
    redis_client.lpush(queue, json.dumps(raw))
    second = producer.enqueue(_event("r2")).event_id
    assert _grants(redis_client, settings)[1] is None  # the first message waited: no grant
    start_worker(settings)
    tickets = producer.store.keys.drain_tickets
    wait_for(lambda: _state(producer, second) == "done", timeout_s=60, what="the ready scope's event")
    wait_for(
        lambda: not redis_client.exists(tickets), timeout_s=60, what="both messages to retire their tickets"
    )
    scope = producer.store.keys.for_tenant(DEFAULT_TENANT).for_scope("topic:r1")
    assert _state(producer, first) == "processing"
    assert redis_client.get(scope.lease("topic:r1")) == token
    producer.close()


def _adopter(settings: Settings, redis_client: Redis) -> ScopeLease:
    return ScopeLease(
        Scripts(redis_client),
        ttl_s=settings.lease_ttl_s,
        renew_interval_s=settings.lease_renew_interval_s,
        window_s=settings.dedupe_window_s,
    )


@pytest.mark.parametrize("case", ["fresh", "waited", "dated-ahead", "taken-since"])
def test_a_grant_that_waited_is_renewed_before_its_drain(
    redis_client: Redis, settings: Settings, case: str
) -> None:
    """A message that waited past a renewal interval (or is dated further ahead of this clock than the slack): its
    lease may have run out. adopt renews it first (taken again when nobody took the scope since; lost when
    somebody did, so the drain does no action). A fresh grant is used as it is: no round trip (its lapsed lease
    here stays lapsed)."""
    producer = Producer(settings)
    producer.enqueue(_event(f"a-{case}"))
    scope_key = f"topic:a-{case}"
    raw = _messages(redis_client, settings)[0]
    grant = message_grant(type("Request", (), {"grant": raw["headers"]["grant"], "delivery_info": {}})())
    assert grant is not None
    scope = producer.store.keys.for_tenant(DEFAULT_TENANT).for_scope(scope_key)
    redis_client.delete(scope.lease(scope_key))  # it ran out while the message waited
    if case == "taken-since":
        redis_client.incr(scope.fence(scope_key))  # another holder was granted the scope meanwhile
    waited_ms = {
        "fresh": -GRANT_CLOCK_SLACK_MS,  # the door's clock ahead, within the slack
        "dated-ahead": -GRANT_CLOCK_SLACK_MS - 1,
    }.get(case, int(settings.lease_renew_interval_s * 1000) + 1)
    lease = _adopter(settings, redis_client)
    found = lease.adopt(
        producer.store.keys, grant.token, grant.granted_ms - waited_ms, grant.popped, now_ms=grant.granted_ms
    )
    lease.stop_renewing()
    assert found is not None and found[1] is not None
    leased = found[1][0]
    assert leased is not None and found[0] == f"{DEFAULT_TENANT}/{scope_key}"
    held = redis_client.get(scope.lease(scope_key))
    if case == "fresh":
        assert held is None and not leased.lost.is_set()
    elif case in ("waited", "dated-ahead"):
        assert held == grant.token and not leased.lost.is_set()
    else:
        assert held is None and leased.lost.is_set()
    producer.close()


def test_message_grant_reads_only_a_first_delivery_of_a_well_formed_grant() -> None:
    """None for no grant, a redelivered message (either of kombu's marks) or a grant of the wrong shape."""

    def request(**fields: Any) -> object:
        return type("Request", (), {"delivery_info": {}, **fields})()

    good = ["t", 5, ["default/s", [1, 1]]]
    assert message_grant(request(grant=good)) is not None
    assert message_grant(request(grant=["t", 5, False])) is not None
    assert message_grant(request()) is None
    assert message_grant(request(grant=good, redelivered=True)) is None
    assert message_grant(request(grant=good, delivery_info={"redelivered": True})) is None
    for bad in (["", 5, False], ["t", "5", False], ["t", True, False], ["t", 5, []], ["t", 5], "t", {}):
        assert message_grant(request(grant=bad)) is None


def test_a_renewal_that_fails_leaves_the_grant_to_no_renewer(redis_client: Redis, settings: Settings) -> None:
    """adopt's renewal of a grant that waited raises (Redis went away): no drain will run the grant, so the
    process's renewer thread must not keep its lease alive either (it would hold the scope for as long as the
    process lives)."""

    class Unreachable(ScopeLease):
        def _renew(self, grant: LeaseGrant) -> RenewCode:
            raise RedisConnectionError("gone")

    producer = Producer(settings)
    producer.enqueue(_event("f1"))
    raw = _messages(redis_client, settings)[0]["headers"]["grant"]
    lease = Unreachable(
        Scripts(redis_client),
        ttl_s=settings.lease_ttl_s,
        renew_interval_s=settings.lease_renew_interval_s,
        window_s=settings.dedupe_window_s,
    )
    with pytest.raises(RedisConnectionError):
        lease.adopt(producer.store.keys, raw[0], raw[1] - 10**9, raw[2], now_ms=raw[1])
    assert lease._current is None
    producer.close()
