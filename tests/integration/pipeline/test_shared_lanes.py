"""A lane two unfinished events keep outlives both (worker/store/lua/lib/kept_lanes.lua, its holders).

Two orders share their charge's ``payload.idempotencyKey``: the first charges and dies, the second finds the
charge's lane (replayed, not charged) and dies too, so both keep the lane without a TTL for their redrives. When
the first of them to end (done, discarded, cancelled, erased) gave the lane its TTL back, or deleted it, the
other's redrive after the TTL charged the order again. The bucket's ``lane-holders`` hash counts the events that
keep each lane, and only the last one's end lets it go. Real Redis; the lanes' TTL is a second, and the tests
wait on Redis's clock past it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from redis import Redis

from producers.sdk.dead_letters import discard_events, redrive_events
from sessions.store import session_scope
from tests.integration.pipeline.test_dead_lanes import (
    LANE_TTL_S,
    SCOPE,
    _charge_pipeline,
    _lanes,
    _order,
    _past_the_lane_ttl,
)
from worker.core.idempotency import TYPED_LANES_FIELD
from worker.ops.erasure import erase_user
from worker.ops.scope_control import cancel_event, pause_scope, resume_scope

pytestmark = pytest.mark.integration

CHARGE_KEY = "order-group-7:charge"


class TwoDeadOrders:
    """Two orders sharing their charge's key, both dead, the charge applied once: ``first`` charged, ``second``
    found the lane and replayed it. ``first_done``: the first shipped (done), so only the second keeps the lane
    (the lane's TTL is an hour then: the second must find it). ``first_of_before``: the first kept the lane before
    the count existed. With ``users``, two users' orders share the lane only in the key form of before (a payload
    key was every user's of the scope; it is one user's now: test_a_payload_key_is_one_users), so both are begun
    in that form."""

    def __init__(
        self,
        make_settings: Any,
        redis_client: Redis,
        users: tuple[str, str] | None = None,
        *,
        first_of_before: bool = False,
        first_done: bool = False,
    ) -> None:
        self.redis = redis_client
        self.lane_ttl_s = 3600 if first_done else LANE_TTL_S
        self.settings, self.producer, self.pipeline = _charge_pipeline(
            make_settings, idempotency_ttl_s=self.lane_ttl_s
        )
        self.b = self.producer.keys.for_scope(SCOPE)
        ids = [self._order(0, users, shipped=first_done)]
        (self.lane,) = [lane for lane in _lanes(redis_client, self.settings.key_prefix) if CHARGE_KEY in lane]
        if first_of_before:
            assert self.holders() == 1
            redis_client.hdel(self.b.lane_holders, self.lane)  # as a worker of before the count left it
        ids.append(self._order(1, users, shipped=False))
        self.first, self.second = ids
        assert self.charged() == 1 and redis_client.ttl(self.lane) == -1
        # of before: the second found the lane kept, by nobody counted, and counted that holder too
        assert self.holders() == (1 if first_done else 2)

    def _order(self, n: int, users: tuple[str, str] | None, *, shipped: bool) -> str:
        if shipped:
            self.fix_shipping()
        user = users[n] if users else None
        event = _order(f"order-{n}", chargeKey=CHARGE_KEY) | ({"userId": user} if user else {})
        event_id = self.producer.enqueue(event).event_id
        if (
            users
        ):  # begun in the key form of before (worker/core/idempotency.py), as a worker of before marked it
            self.redis.hset(self.b.event(event_id), TYPED_LANES_FIELD, "1")
        assert self.pipeline.drain_scope(SCOPE).next == "idle"
        assert self.status(event_id) == ("done" if shipped else "dead")
        self.redis.delete(self.b.plugin(SCOPE, "shipping-fixed"))
        return event_id

    def status(self, event_id: str) -> str:
        return str((self.producer.status(event_id) or {"status": "unknown"})["status"])

    def charged(self) -> int:
        return int(self.redis.get(self.b.plugin(SCOPE, "charged")) or 0)

    def holders(self) -> int | None:
        count = self.redis.hget(self.b.lane_holders, self.lane)
        return None if count is None else int(count)

    def fix_shipping(self) -> None:
        self.redis.set(self.b.plugin(SCOPE, "shipping-fixed"), "1")

    def run_to_done(self, event_id: str) -> None:
        assert redrive_events(self.producer, [event_id])["redriven"] == [event_id]
        assert self.pipeline.drain_scope(SCOPE).next == "idle"
        assert self.status(event_id) == "done"

    def the_other_redriven_past_the_ttl_charges_nothing(self, event_id: str) -> None:
        """The lane kept for ``event_id`` however long it waits: its redrive replays the charge. (Kept without a
        TTL is what decides: with ``first_done`` the TTL is an hour, and the wait past a second proves nothing.)"""
        assert self.redis.ttl(self.lane) == -1 and self.holders() == 1
        self.fix_shipping()
        _past_the_lane_ttl(self.redis)
        self.run_to_done(event_id)
        assert self.charged() == 1
        assert 0 < self.redis.ttl(self.lane) <= self.lane_ttl_s  # the last holder's end gave it its TTL back
        assert self.holders() is None

    def close(self) -> None:
        self.producer.close()
        self.pipeline.store.client.close()


@pytest.fixture
def two_orders(make_settings: Any, redis_client: Redis) -> Iterator[Callable[..., TwoDeadOrders]]:
    """``TwoDeadOrders`` of the test's settings, closed at its end however it ends."""
    made: list[TwoDeadOrders] = []

    def make(users: tuple[str, str] | None = None, **options: bool) -> TwoDeadOrders:
        made.append(TwoDeadOrders(make_settings, redis_client, users, **options))
        return made[-1]

    yield make
    for orders in made:
        orders.close()


def test_the_second_to_die_done_first_leaves_the_lane_to_the_first(
    two_orders: Callable[..., TwoDeadOrders],
) -> None:
    orders = two_orders()
    orders.fix_shipping()
    orders.run_to_done(orders.second)
    orders.the_other_redriven_past_the_ttl_charges_nothing(orders.first)


def test_a_discard_leaves_the_lane_to_the_other(two_orders: Callable[..., TwoDeadOrders]) -> None:
    orders = two_orders()
    assert discard_events(orders.producer, [orders.first], "given up")["discarded"] == [orders.first]
    orders.the_other_redriven_past_the_ttl_charges_nothing(orders.second)


@pytest.mark.parametrize("by", ["operator", "found at its take"])
def test_a_cancel_leaves_the_lane_to_the_other(
    two_orders: Callable[..., TwoDeadOrders], redis_client: Redis, by: str
) -> None:
    """Redriven into a paused scope, the first is cancelled there: by an operator's CANCEL (queued), or found
    asked when the lease's grant takes it (a cancel asked while it ran, its worker gone)."""
    orders = two_orders()
    store, keys = orders.producer.store, orders.producer.keys
    assert pause_scope(store, keys, SCOPE)
    assert redrive_events(orders.producer, [orders.first])["redriven"] == [orders.first]
    if by == "operator":
        assert cancel_event(store, keys, orders.first).now
    else:
        redis_client.hset(orders.b.event(orders.first), "cancelRequested", "1")
    assert resume_scope(store, keys, SCOPE, lambda ref: None)
    assert orders.pipeline.drain_scope(SCOPE).next == "idle"
    assert orders.status(orders.first) == "cancelled"
    orders.the_other_redriven_past_the_ttl_charges_nothing(orders.second)


@pytest.mark.parametrize("first", ["dead", "done", "done, its hash expired"])
def test_an_erasure_leaves_the_lane_to_another_users_event(
    two_orders: Callable[..., TwoDeadOrders], redis_client: Redis, first: str
) -> None:
    """The first order's user is erased, and the lane is left to the second order, of another user: the first
    order dead (the lane its event keeps), or done (the lane its chain names, which the erasure deletes by name:
    in its scope's script, or once its hash has expired, by the chains of the user's expired events)."""
    first_done = first != "dead"
    orders = two_orders(users=("u_gone", "u_kept"), first_done=first_done)
    if first == "done, its hash expired":
        redis_client.delete(orders.b.event(orders.first))
    report = erase_user(orders.producer.store, orders.producer.keys, "u_gone", session_scope=session_scope)
    assert report.busy_scopes == []
    assert orders.status(orders.first) == {"dead": "erased", "done": "done"}.get(first, "unknown")
    orders.the_other_redriven_past_the_ttl_charges_nothing(orders.second)


@pytest.mark.parametrize("first_of_before", [False, True])
def test_the_first_to_end_done_leaves_the_lane_to_the_other(
    two_orders: Callable[..., TwoDeadOrders], first_of_before: bool
) -> None:
    """Also when the first kept the lane before the count existed (no field): the second, finding it kept without
    a TTL by nobody counted, counts that holder too, so the first's end does not let go of it."""
    orders = two_orders(first_of_before=first_of_before)
    orders.fix_shipping()
    orders.run_to_done(orders.first)
    orders.the_other_redriven_past_the_ttl_charges_nothing(orders.second)


def test_a_count_left_over_for_a_lane_nobody_keeps_starts_again(
    make_settings: Any, redis_client: Redis
) -> None:
    """A release from before the count left one (the lane gone, or given its TTL back): the next event to keep
    the lane counts itself alone, and its end gives the lane its TTL back."""
    _, producer, pipeline = _charge_pipeline(make_settings, idempotency_ttl_s=LANE_TTL_S)
    b = producer.keys.for_scope(SCOPE)
    event_id = producer.enqueue(_order("order-once", chargeKey=CHARGE_KEY)).event_id
    lane = b.idempotency(SCOPE, f"u=:{CHARGE_KEY}")  # an event of no user
    redis_client.hset(b.lane_holders, lane, 3)  # stale: the lane does not exist
    assert pipeline.drain_scope(SCOPE).next == "idle"
    assert (producer.status(event_id) or {})["status"] == "dead"
    assert redis_client.hget(b.lane_holders, lane) == "1" and redis_client.ttl(lane) == -1
    redis_client.set(b.plugin(SCOPE, "shipping-fixed"), "1")
    assert redrive_events(producer, [event_id])["redriven"] == [event_id]
    assert pipeline.drain_scope(SCOPE).next == "idle"
    assert 0 < redis_client.ttl(lane) <= LANE_TTL_S and redis_client.hget(b.lane_holders, lane) is None
    producer.close()
    pipeline.store.client.close()


def test_an_erasure_of_both_holders_user_deletes_the_lane(
    two_orders: Callable[..., TwoDeadOrders], redis_client: Redis
) -> None:
    """Both orders the erased user's: the second tombstone lets go of the lane, which goes with its count."""
    orders = two_orders(("u_gone", "u_gone"))
    erase_user(orders.producer.store, orders.producer.keys, "u_gone", session_scope=session_scope)
    assert redis_client.exists(orders.lane) == 0 and orders.holders() is None


def test_a_payload_key_is_one_users(make_settings: Any, redis_client: Redis) -> None:
    """A derived-id walk: two users' events in one scope whose actions share a ``payload.idempotencyKey`` took one
    lane, and the second user's action replayed the first's result and never ran. A payload key is one user's
    lane now (``u=<userId>:<key>``): alice's and bob's orders both charge, alice's second order with the key
    replays her first (the plugin's key dedupes across her events, as LobeHub's does)."""
    _, producer, pipeline = _charge_pipeline(make_settings)
    b = producer.keys.for_scope(SCOPE)
    redis_client.set(b.plugin(SCOPE, "shipping-fixed"), "1")
    for n, user in enumerate(("alice", "bob", "alice")):
        event_id = producer.enqueue(_order(f"order-{n}", chargeKey=CHARGE_KEY) | {"userId": user}).event_id
        assert pipeline.drain_scope(SCOPE).next == "idle"
        assert (producer.status(event_id) or {})["status"] == "done"
    assert redis_client.get(b.plugin(SCOPE, "charged")) == "2"
    assert (
        redis_client.exists(
            b.idempotency(SCOPE, f"u=alice:{CHARGE_KEY}"), b.idempotency(SCOPE, f"u=bob:{CHARGE_KEY}")
        )
        == 2
    )
    producer.close()
    pipeline.store.client.close()


def test_an_event_begun_in_the_form_of_before_keeps_its_keys(make_settings: Any, redis_client: Redis) -> None:
    """An event a worker of before marked (form 1: a payload key as it is) runs here under that key, and keeps its
    mark. Its lane, under the bare key, is read by a later event of today's form as the key's other form, of
    whichever user: bob's order replays alice's charge, as before the upgrade (the price of one user's events of
    both forms applying a key once, docs/operations.md "Payload keys per user"), until lanes of before expire."""
    _, producer, pipeline = _charge_pipeline(make_settings)
    b = producer.keys.for_scope(SCOPE)
    redis_client.set(b.plugin(SCOPE, "shipping-fixed"), "1")
    before = producer.enqueue(_order("order-b", chargeKey=CHARGE_KEY) | {"userId": "alice"}).event_id
    redis_client.hset(b.event(before), TYPED_LANES_FIELD, "1")
    assert pipeline.drain_scope(SCOPE).next == "idle"
    assert redis_client.exists(b.idempotency(SCOPE, CHARGE_KEY)) == 1
    assert redis_client.hget(b.event(before), TYPED_LANES_FIELD) == "1"  # kept: never marked again
    producer.enqueue(_order("order-n", chargeKey=CHARGE_KEY) | {"userId": "bob"})
    assert pipeline.drain_scope(SCOPE).next == "idle"
    assert redis_client.get(b.plugin(SCOPE, "charged")) == "1"
    assert redis_client.exists(b.idempotency(SCOPE, f"u=bob:{CHARGE_KEY}")) == 0  # replayed, nothing marked
    producer.close()
    pipeline.store.client.close()


@pytest.mark.parametrize("hash_gone", [False, True])
def test_an_erasure_deletes_a_users_payload_key_lane(
    make_settings: Any, redis_client: Redis, hash_gone: bool
) -> None:
    """The erasure names a done event's lanes in its key form, its user's payload key included, also once its
    hash has expired (the chain's source names the user); another user's lane of the same key stays."""
    _, producer, pipeline = _charge_pipeline(make_settings, idempotency_ttl_s=3600)
    b = producer.keys.for_scope(SCOPE)
    redis_client.set(b.plugin(SCOPE, "shipping-fixed"), "1")
    gone = producer.enqueue(_order("order-g", chargeKey=CHARGE_KEY) | {"userId": "u_gone"}).event_id
    producer.enqueue(_order("order-k", chargeKey=CHARGE_KEY) | {"userId": "u_kept"})
    assert pipeline.drain_scope(SCOPE).next == "idle"
    mine, theirs = (b.idempotency(SCOPE, f"u={u}:{CHARGE_KEY}") for u in ("u_gone", "u_kept"))
    assert redis_client.exists(mine, theirs) == 2
    if hash_gone:
        redis_client.delete(b.event(gone))
    producer.enqueue(_order("order-q", chargeKey="other") | {"userId": "u_kept"})  # queued: the scope is kept
    erase_user(producer.store, producer.keys, "u_gone", session_scope=session_scope)
    assert redis_client.exists(mine) == 0 and redis_client.exists(theirs) == 1
    producer.close()
    pipeline.store.client.close()


@pytest.mark.parametrize("factory", ["plugin", "batch_plugin"])
@pytest.mark.parametrize("first_form", ["1", "2"])
def test_one_users_payload_key_dedupes_across_the_two_forms(
    make_settings: Any, redis_client: Redis, factory: str, first_form: str
) -> None:
    """A review: alice's order begun in the form of before (its lane under the bare key) and her order of today's
    form (``u=alice:<key>``) sharing a charge key charged twice, for as long as lanes of before live. A lookup reads
    the key's other form too: either order after the other replays the charge (the batch path runs such an event
    alone, where Redis is read)."""
    _, producer, pipeline = _charge_pipeline(make_settings, factory, max_attempts=2, commit_batch_max=16)
    b = producer.keys.for_scope(SCOPE)
    redis_client.set(b.plugin(SCOPE, "shipping-fixed"), "1")
    order = _order("order-a", chargeKey=CHARGE_KEY) | {"userId": "alice"}
    first = producer.enqueue(order).event_id
    if first_form == "1":
        redis_client.hset(b.event(first), TYPED_LANES_FIELD, "1")
    assert pipeline.drain_scope(SCOPE).next == "idle"
    second = producer.enqueue(order | {"sourceId": "order-b"}).event_id
    if first_form == "2":
        redis_client.hset(b.event(second), TYPED_LANES_FIELD, "1")
    # with the second, in one run on the batch path: an order of another key (charged once more)
    other = producer.enqueue(_order("order-c", chargeKey="another") | {"userId": "alice"}).event_id
    assert pipeline.drain_scope(SCOPE).next == "idle"
    assert [(producer.status(e) or {})["status"] for e in (first, second, other)] == ["done"] * 3
    assert redis_client.get(b.plugin(SCOPE, "charged")) == "2"
    producer.close()
    pipeline.store.client.close()


@pytest.mark.parametrize("factory", ["plugin", "batch_plugin"])
def test_a_payload_key_shaped_as_another_users_lane_is_not_its_alias(
    make_settings: Any, redis_client: Redis, factory: str
) -> None:
    """An upgrade walk: alice's order whose charge key was ``u=bob:<bob's key>`` looked up that bare key as its key's
    other form, found bob's lane of today's form there, and replayed bob's charge (his action id in her chain). A
    bare key of that shape is no alias: alice is charged, under her own lane."""
    _, producer, pipeline = _charge_pipeline(make_settings, factory, commit_batch_max=16)
    b = producer.keys.for_scope(SCOPE)
    redis_client.set(b.plugin(SCOPE, "shipping-fixed"), "1")
    producer.enqueue(_order("order-bob", chargeKey=CHARGE_KEY) | {"userId": "bob"})
    assert pipeline.drain_scope(SCOPE).next == "idle"
    shaped = f"u=bob:{CHARGE_KEY}"
    alice = producer.enqueue(_order("order-alice", chargeKey=shaped) | {"userId": "alice"}).event_id
    assert pipeline.drain_scope(SCOPE).next == "idle"
    assert (producer.status(alice) or {})["status"] == "done"
    assert redis_client.get(b.plugin(SCOPE, "charged")) == "2"
    assert redis_client.exists(b.idempotency(SCOPE, f"u=alice:{shaped}")) == 1
    producer.close()
    pipeline.store.client.close()


def test_an_erasure_leaves_the_lane_a_shaped_key_names(make_settings: Any, redis_client: Redis) -> None:
    """Erasing alice, whose order's hash is gone, deleted her key's lanes of the older forms too while they had a
    TTL: her key ``u=bob:<bob's key>`` as it is, bob's done lane, so bob's resend would charge again. Such a key
    is left to its TTL; alice's own lane goes."""
    _, producer, pipeline = _charge_pipeline(make_settings, idempotency_ttl_s=3600)
    b = producer.keys.for_scope(SCOPE)
    redis_client.set(b.plugin(SCOPE, "shipping-fixed"), "1")
    producer.enqueue(_order("order-bob", chargeKey=CHARGE_KEY) | {"userId": "bob"})
    shaped = f"u=bob:{CHARGE_KEY}"
    alice = producer.enqueue(_order("order-alice", chargeKey=shaped) | {"userId": "alice"}).event_id
    assert pipeline.drain_scope(SCOPE).next == "idle"
    bobs, hers = b.idempotency(SCOPE, shaped), b.idempotency(SCOPE, f"u=alice:{shaped}")
    assert redis_client.exists(bobs, hers) == 2
    redis_client.delete(b.event(alice))
    producer.enqueue(_order("order-q", chargeKey="other") | {"userId": "bob"})  # queued: the scope is kept
    erase_user(producer.store, producer.keys, "alice", session_scope=session_scope)
    assert redis_client.exists(hers) == 0 and redis_client.exists(bobs) == 1
    producer.close()
    pipeline.store.client.close()
