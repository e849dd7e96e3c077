"""The outbox relay's pool of deliveries (worker/outbox/delivery_pool.py), without Redis: slots per tenant, the
claim each delivery settles under, and threads that outlive a deliverer's SystemExit."""

from __future__ import annotations

import threading

from worker.outbox.delivery_pool import DeliveryPool


def test_a_tenant_holds_half_the_slots_and_gives_them_back() -> None:
    pool, release = DeliveryPool(4), threading.Event()
    assert pool.per_tenant == 2
    for n in range(2):
        pool.submit("a", f"m{n}", 100, release.wait)
    assert not pool.room_for("a") and pool.room_for("b")
    pool.submit("b", "m2", 100, release.wait)
    pool.submit("b", "m3", 100, release.wait)
    assert not pool.room_for("c")  # the pool is full
    release.set()
    assert pool.wait_idle(30) and pool.in_flight() == 0 and pool.room_for("a")


def test_a_claim_taken_again_goes_to_the_delivery_in_flight() -> None:
    pool, release = DeliveryPool(2), threading.Event()
    assert not pool.claimed_again("m", 200)  # nothing in flight: a new delivery
    pool.submit("a", "m", 100, release.wait)
    assert pool.deadline_of("m", 100) == 100
    assert pool.claimed_again("m", 200) and pool.deadline_of("m", 100) == 200
    release.set()
    assert pool.wait_idle(30)
    assert pool.deadline_of("m", 100) == 100 and not pool.claimed_again("m", 300)  # forgotten once settled


def test_a_deliverer_that_exits_leaves_its_thread_and_its_slot() -> None:
    """A review: a SystemExit from a plugin's deliverer ended its pool thread for good, and the pool shrank."""
    pool, done = DeliveryPool(1), threading.Event()

    def exits() -> None:
        raise SystemExit(3)

    pool.submit("a", "m1", 100, exits)
    assert pool.wait_idle(30) and pool.room_for("a")
    pool.submit("a", "m2", 100, done.set)  # the one thread still serves
    assert done.wait(30) and pool.wait_idle(30)


def test_one_lanes_deliveries_run_in_order_and_other_lanes_alongside() -> None:
    """A scope's records were delivered one at a time, in claim order, when the relay had one thread; on the pool
    a skill's update could be handed over before its creation. One lane's deliveries follow each other."""
    pool, release, order = DeliveryPool(4), threading.Event(), []
    pool.submit("a", "m1", 100, lambda: (release.wait(30), order.append("m1")), lane="scope-1")
    pool.submit("a", "m2", 100, lambda: order.append("m2"), lane="scope-1")
    other = threading.Event()
    pool.submit("b", "m3", 100, other.set, lane="scope-2")
    assert other.wait(30) and order == []  # another lane is not held up; m2 waits behind m1
    release.set()
    assert pool.wait_idle(30) and order == ["m1", "m2"]
