"""Drain tickets (worker/runtime/fair.py) on a real Redis: how many drain_next messages are out, and what heals a
miscount. The Celery app is replaced by a recorder of sent messages (and, where a test says so, a broker
that fails), since what is tested is the count in Redis next to what was sent."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from worker.keys.layout import BucketKeys
from worker.runtime.fair import DRAIN_NEXT_TASK, FairQueue
from worker.store.calls import TicketForce
from worker.store.scripts import Scripts

pytestmark = pytest.mark.integration


@dataclass
class Broker:
    """Records ``send_task`` calls; the ``fail_from``-th call (1-based) and every later one raise."""

    fail_from: int = 0
    sent: list[str] = field(default_factory=list)

    def send_task(self, name: str, args: Any = (), **options: Any) -> None:
        if self.fail_from and len(self.sent) + 1 >= self.fail_from:
            raise ConnectionError("broker down")
        self.sent.append(name)


def _queue(redis_client: Redis, keys: BucketKeys, broker: Broker, messages_max: int = 5) -> FairQueue:
    return FairQueue(redis_client, keys, broker, "q", messages_max=messages_max, ticket_ttl_ms=60_000)


def _refs(n: int) -> list[str]:
    return [f"t1/topic:{i}" for i in range(n)]


def test_tickets_cap_the_messages_and_the_last_pop_retires_them(
    redis_client: Redis, keys: BucketKeys
) -> None:
    """12 scopes made ready with a cap of 5: 5 messages; popping them all, then once more, leaves no ticket."""
    broker = Broker()
    fair = _queue(redis_client, keys, broker)
    fair.publish_many(_refs(12))
    assert broker.sent == [DRAIN_NEXT_TASK] * 5
    assert redis_client.get(keys.drain_tickets) == "5"
    popped = [fair.pop() for _ in range(12)]
    assert sorted(popped) == sorted(_refs(12))  # type: ignore[type-var]
    assert redis_client.get(keys.drain_tickets) == "5"  # no message has found the lists empty yet
    assert fair.pop() is None
    assert redis_client.get(keys.drain_tickets) == "4"
    for _ in range(4):
        assert fair.pop() is None
    assert not redis_client.exists(keys.drain_tickets)


def test_a_failed_send_gives_back_every_unsent_ticket(redis_client: Redis, keys: BucketKeys) -> None:
    """The third of five sends fails: the two sent keep their tickets, the three unsent are given back."""
    broker = Broker(fail_from=3)
    fair = _queue(redis_client, keys, broker)
    with pytest.raises(ConnectionError):
        fair.publish_many(_refs(5))
    assert len(broker.sent) == 2
    assert redis_client.get(keys.drain_tickets) == "2"
    assert redis_client.llen(keys.ready("t1")) == 5  # the scopes are ready: the two messages will pop them


def test_the_sweep_sends_one_message_past_a_count_left_high(redis_client: Redis, keys: BucketKeys) -> None:
    """Tickets counted for messages the broker lost (the count at its cap, nothing out): a publish sends
    nothing, the sweep's publish still sends one message."""
    fair = _queue(redis_client, keys, Broker())
    fair.publish_many(_refs(5))  # 5 tickets taken; pretend their messages were lost
    broker = Broker()
    fair = _queue(redis_client, keys, broker)
    fair.publish_many(["t1/topic:stranded"])
    assert broker.sent == []
    fair.publish_stranded(["t1/topic:stranded"])
    assert broker.sent == [DRAIN_NEXT_TASK]
    assert redis_client.get(keys.drain_tickets) == "6"


def test_a_count_expires_after_the_last_ticket_taken(redis_client: Redis, keys: BucketKeys) -> None:
    """Pushes that take no ticket and pops do not keep the count alive: its TTL is the last ticket's."""
    fair = _queue(redis_client, keys, Broker(), messages_max=1)
    fair.publish_many(["t1/topic:a"])
    redis_client.pexpire(keys.drain_tickets, 5_000)  # as if that ticket was taken 55 s ago (TTL 60 s)
    fair.publish_many(["t1/topic:b"])  # at the cap: no ticket taken
    assert fair.pop() is not None
    ttl_ms = int(redis_client.pttl(keys.drain_tickets))
    assert 0 < ttl_ms <= 5_000, f"the count was kept alive: {ttl_ms} ms left"


@pytest.mark.parametrize(
    ("before", "wanted", "at_least", "taken", "after"),
    [
        (None, 3, 0, 3, 3),  # no count: one ticket per waiting scope
        (None, 0, 1, 1, 1),  # no count and none waiting: the one the sweep always sends
        ("2", 5, 0, 3, 5),  # enough that one is out per waiting scope
        (None, 80, 0, 64, 64),  # at most the cap
        ("60", 10, 0, 0, 60),  # as many out already: nothing taken
        ("60", 10, 1, 1, 61),  # ``at_least`` is taken whatever the count
        ("64", 3, 0, 0, 64),  # at the cap and nothing forced: nothing taken
        ("64", 3, 1, 1, 65),  # at the cap: one past it
        ("-4", 2, 0, 2, 2),  # a count below zero reads as zero
    ],
)
def test_ticket_force_takes_a_ticket_per_waiting_scope_under_the_cap(
    redis_client: Redis,
    keys: BucketKeys,
    before: str | None,
    wanted: int,
    at_least: int,
    taken: int,
    after: int,
) -> None:
    """TICKET_FORCE, the sweep's tickets for scopes waiting on their lists: enough that one is out per waiting
    scope (at most the cap, 64), and at least ``at_least`` taken, past the cap if need be. Only tickets taken for
    the waiting renew the count's TTL: a count inflated by lost messages expires although each sweep forces one."""
    if before is not None:
        redis_client.set(keys.drain_tickets, before, px=5_000)
    call = TicketForce(keys.drain_tickets, 60_000, wanted, 64, at_least)
    assert int(Scripts(redis_client).run(call)) == taken
    assert int(redis_client.get(keys.drain_tickets) or 0) == after
    ttl_ms = int(redis_client.pttl(keys.drain_tickets))
    needed = min(wanted, 64) - max(int(before or 0), 0)  # tickets taken for the waiting, not forced
    if before is None or needed > 0:  # the ticket TTL again, as READY_PUSH's tickets give it
        assert ttl_ms > 5_000
    else:  # none taken, or only the forced one: the count's own TTL, so an inflated count still expires
        assert 0 < ttl_ms <= 5_000


def test_a_failed_ticket_force_still_sends_the_pushed_refs_messages(
    redis_client: Redis, keys: BucketKeys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweep pushed a stranded ref (its ticket taken), then TICKET_FORCE for two waiting scopes failed (a
    connection cut): the pushed ref's message is sent still, so no ticket is counted without its message."""
    broker = Broker()
    fair = _queue(redis_client, keys, broker)
    run = fair.scripts.run

    def cut_at_the_force(call: Any, **options: Any) -> Any:
        if isinstance(call, TicketForce):
            raise RedisConnectionError("connection cut")
        return run(call, **options)

    monkeypatch.setattr(fair.scripts, "run", cut_at_the_force)
    fair.publish_stranded(["t1/topic:stranded"], waiting=2)
    assert broker.sent == [DRAIN_NEXT_TASK]
    assert redis_client.get(keys.drain_tickets) == "1"


def test_a_push_failing_partway_sends_the_messages_of_the_pushes_before_it(
    redis_client: Redis, keys: BucketKeys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One READY_PUSH a call (a Redis Cluster's way): the second of three fails, so the first, which took its
    ticket, has its message sent before the error goes on (no ticket counted without its message)."""
    broker = Broker()
    fair = _queue(redis_client, keys, broker)
    monkeypatch.setattr(fair.scripts, "plain", False)
    run = fair.scripts.run
    calls: list[Any] = []

    def cut_at_the_second(call: Any, **options: Any) -> Any:
        calls.append(call)
        if len(calls) == 2:
            raise RedisConnectionError("connection cut")
        return run(call, **options)

    monkeypatch.setattr(fair.scripts, "run", cut_at_the_second)
    with pytest.raises(RedisConnectionError):
        fair.publish_many(_refs(3))
    assert broker.sent == [DRAIN_NEXT_TASK]
    assert redis_client.get(keys.drain_tickets) == "1"
    assert redis_client.llen(keys.ready("t1")) == 1
