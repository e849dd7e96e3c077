"""The fault battery's short variants (one child kill, one pause, one Redis restart with AOF) and its checker.

Each scenario starts its own ``redis-server`` (AOF, fsync always) on a free loopback port and real worker
processes; ``make chaos`` runs the long variants of all nine scenarios (``python -m tests.chaos``).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest
from redis import Redis

from tests.chaos.checker import Row, check_history
from tests.chaos.history_plugin import HistoryKeys
from tests.chaos.processes import RedisServer
from tests.chaos.receiver import Receipts
from tests.chaos.scenarios import child_kill, paused_holder, redis_restart
from worker.keys.layout import BucketKeys
from worker.outbox.relay import OutboxRecord, outbox_commands

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs the redis-server binary"),
]


def _assert_held(row: Row, *, fenced: int = 0) -> None:
    """Nothing lost, applied twice, out of order, stale or dead (nothing is poisoned here); every done event
    had exactly one effect at the receiver; at least ``fenced`` late commits refused."""
    history = row.history
    report = "\n".join([*row.expectations, *history.problems])
    assert (history.lost, history.applied_twice, history.order_violations) == (0, 0, 0), report
    assert (history.stale_commits, history.dead, history.expected_dead) == (0, 0, 0), report
    assert (history.effects_lost, history.effects_twice) == (0, 0), report
    assert history.deliveries >= history.done == history.events > 0, report
    assert history.fence_rejections >= fenced, report
    assert not row.expectations, report
    assert row.ok, report


def test_one_child_kill_loses_nothing_and_applies_once() -> None:
    """SIGKILL of a pool child mid-action: every event ends done, each effect applied once, in scope order.
    The workload's handlers are batch-safe and its events all queued before the first drain, so the scopes the
    kill did not reach commit in runs (the killed one's redo runs one by one: a lost delivery)."""
    row = child_kill(long=False)
    _assert_held(row)
    assert row.history.batched > 0, "no event committed in a run: the battery missed the runs' commit path"


def test_one_paused_lease_holder_is_fenced_off() -> None:
    """SIGSTOP of a lease holder until another process took the event over: the holder's late commit is
    refused once it runs again, nothing lands twice."""
    _assert_held(paused_holder(long=False), fenced=1)


def test_one_redis_restart_from_aof_loses_nothing() -> None:
    """SIGKILL of Redis mid-load and a restart from its AOF: every accepted event ends done, applied once."""
    _assert_held(redis_restart(long=False))


@pytest.fixture
def private_redis() -> Iterator[Redis]:
    directory = Path(tempfile.mkdtemp(prefix="agent-signal-chaos-checker-"))
    server = RedisServer(directory)
    server.start()
    client = Redis.from_url(server.url, decode_responses=True)
    try:
        yield client
    finally:
        client.close()
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


def test_checker_counts_what_it_is_shown(private_redis: Redis) -> None:
    """The checker finds a lost event, a double application, an order inversion, a stale commit, a healthy
    event dead and a poisoned one alive, a lost effect and an effect applied twice."""
    prefix = "chk:"
    keys = BucketKeys(prefix)
    history = HistoryKeys(keys.bucket_prefix)
    accepted = {f"e{i}": (f"s-{i}", "topic:a", i) for i in range(6)}
    for i in range(6):
        private_redis.hset(keys.event(f"e{i}"), mapping={"state": "done", "fence": "2"})
    private_redis.hset(keys.event("e3"), "state", "processing")  # never finished: lost
    private_redis.hset(keys.event("e4"), "state", "dead")  # healthy yet dead
    private_redis.hset(history.applied, mapping={"s-0": 1, "s-1": 2, "s-2": 1, "s-5": 1})  # s-1 twice
    private_redis.hset(history.committed, mapping={"s-0": 1, "s-1": 1, "s-2": 1, "s-5": 1})
    private_redis.rpush(history.order("topic:a"), 0, 2, 1, 5)  # 2 before 1
    # seq 2 committed under an old fence
    private_redis.rpush(history.commit_order("topic:a"), "0:2", "1:2", "2:1", "5:2")
    private_redis.hset(keys.stats, "fenceRejected", 3)
    outcomes: list[tuple[int, Literal["delivered", "dead"]]] = [
        (0, "delivered"),
        (1, "delivered"),
        (2, "dead"),
        (5, "delivered"),
    ]
    for i, state in outcomes:
        sid = f"s-{i}"
        record = OutboxRecord(
            f"chaos-hook:k-{sid}", "chaos-hook", f"k-{sid}", {"sid": sid}, "topic:a", f"e{i}", i, state
        )
        for command in outbox_commands(keys, record, 600):  # stored as the engine stores it
            private_redis.execute_command(*command)  # type: ignore[no-untyped-call]
    receipts = Receipts(  # s-0 once (delivered twice), s-1 under two keys, s-2 never, s-5 once
        deliveries={"k-s-0": 2, "k-s-1": 1, "k-s-1b": 1, "k-s-5": 1},
        effects={"k-s-0": 1, "k-s-1": 1, "k-s-1b": 1, "k-s-5": 1},
        sid_of={"k-s-0": "s-0", "k-s-1": "s-1", "k-s-1b": "s-1", "k-s-5": "s-5"},
    )
    found = check_history(private_redis, prefix, accepted, poisoned={"s-5"}, receipts=receipts)
    assert (found.lost, found.applied_twice, found.order_violations) == (1, 1, 1)
    assert (found.stale_commits, found.fence_rejections, found.done) == (1, 3, 4)
    assert (found.dead, found.expected_dead, found.dead_mismatch) == (1, 1, 2)  # e4 dead, s-5 not
    assert (found.effects_lost, found.effects_twice, found.deliveries) == (1, 1, 5)  # s-2 lost, s-1 twice
    assert not found.ok
