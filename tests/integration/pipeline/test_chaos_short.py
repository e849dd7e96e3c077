"""The fault battery's short variants (one child kill, one pause, one Redis restart with AOF) and its checker.

Each scenario starts its own ``redis-server`` (AOF, fsync always) on a free loopback port and real worker
processes; ``make chaos`` runs the long variants of all nine scenarios (``python -m tests.chaos``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, cast

import pytest
from redis import Redis

from tests.chaos.checker import Row, check_history
from tests.chaos.history_plugin import RECEIVER_ENV, HistoryKeys, _hook_deliverer
from tests.chaos.processes import ROOT, RedisServer, wait_until
from tests.chaos.receiver import Receipts, Receiver
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


# A relay's delivery, SIGKILLed between its request's header write and its body write (httpcore writes them apart).
_CUT_AFTER_HEADERS = """
import os, signal
import httpcore._sync.http11 as http11
from tests.chaos.history_plugin import _hook_deliverer
from worker.chain.outbox_records import OutboxRecord

def die(self, request):
    os.kill(os.getpid(), signal.SIGKILL)

http11.HTTP11Connection._send_request_body = die
_hook_deliverer(None)(OutboxRecord("chaos-hook:k-s-0", "chaos-hook", "k-s-0", {"sid": "s-0"}, "topic:a", "e0", 0))
"""


def test_a_delivery_cut_before_its_body_is_no_effect(
    private_redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """worker-kill SIGKILLs a worker's master, where its outbox relay delivers; a kill between a POST's headers and
    its body leaves the receiver reading EOF where the body should be. That request is no delivery and no effect:
    the relay's redelivery of the record (its claim lapsed) applies it. Read as ``{}``, it applied the key's effect
    under no source id, the redelivery was a repeat, and the checker reported the event's effect lost
    (``delivered``, no effect, one delivery more than events: the unexplained worker-kill row)."""
    receiver = Receiver()
    monkeypatch.setenv(RECEIVER_ENV, receiver.url)
    try:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        child = subprocess.run([sys.executable, "-c", _CUT_AFTER_HEADERS], env=env, cwd=ROOT, timeout=60)
        assert child.returncode == -signal.SIGKILL
        wait_until(lambda: receiver.receipts().log, 10, "the receiver to read the cut request")
        record = OutboxRecord("chaos-hook:k-s-0", "chaos-hook", "k-s-0", {"sid": "s-0"}, "topic:a", "e0", 0)
        _hook_deliverer(cast(Any, None))(record)  # the redelivery, whole
        receipts = receiver.receipts()
    finally:
        receiver.close()
    keys = BucketKeys("cut:")
    history = HistoryKeys(keys.bucket_prefix)
    private_redis.hset(keys.event("e0"), mapping={"state": "done", "fence": "1"})
    private_redis.hset(history.applied, "s-0", 1)
    private_redis.hset(history.committed, "s-0", 1)
    record.state = "delivered"
    for command in outbox_commands(keys, record, 600):  # stored as the engine stores it once delivered
        private_redis.execute_command(*command)  # type: ignore[no-untyped-call]
    found = check_history(private_redis, "cut:", {"e0": ("s-0", "topic:a", 0)}, receipts=receipts)
    assert (found.effects_lost, found.effects_twice, found.deliveries) == (0, 0, 1), found.problems
    assert receipts.sid_of == {"k-s-0": "s-0"}
    assert receipts.incomplete == 1
