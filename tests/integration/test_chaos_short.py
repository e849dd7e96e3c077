"""The fault battery's short variants (one child kill, one pause, one Redis restart with AOF) and its checker.

Each scenario starts its own ``redis-server`` (AOF, fsync always) on a free loopback port and real worker
processes; ``make chaos`` runs the long variants of all nine scenarios (``python -m tests.chaos``).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from tests.chaos.harness import RedisServer, Row, check_history
from tests.chaos.history_plugin import HistoryKeys
from tests.chaos.scenarios import child_kill, paused_holder, redis_restart
from worker.keys import Keys

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs the redis-server binary"),
]


def _assert_held(row: Row) -> None:
    history = row.history
    report = "\n".join([*row.expectations, *history.problems])
    assert (history.lost, history.applied_twice, history.order_violations) == (0, 0, 0), report
    assert history.stale_commits == 0, report
    assert not row.expectations, report
    assert history.events > 0


def test_one_child_kill_loses_nothing_and_applies_once() -> None:
    """SIGKILL of a pool child mid-action: every event ends done, each effect applied once, in scope order."""
    _assert_held(child_kill(long=False))


def test_one_paused_lease_holder_is_fenced_off() -> None:
    """SIGSTOP of a lease holder past its TTL: another process takes the event over, nothing lands twice."""
    _assert_held(paused_holder(long=False))


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
    """The checker finds a lost event, a double application, an order inversion and a stale commit."""
    prefix = "chk:"
    keys, history = Keys(prefix), HistoryKeys(prefix)
    accepted = {f"e{i}": (f"s-{i}", "topic:a", i) for i in range(4)}
    for i in range(4):
        private_redis.hset(keys.event(f"e{i}"), mapping={"state": "done", "fence": "2"})
    private_redis.hset(keys.event("e3"), "state", "processing")  # never finished: lost
    private_redis.hset(history.applied, mapping={"s-0": 1, "s-1": 2, "s-2": 1})  # s-1 twice
    private_redis.hset(history.committed, mapping={"s-0": 1, "s-1": 1, "s-2": 1})
    private_redis.rpush(history.order("topic:a"), 0, 2, 1)  # 2 before 1
    private_redis.rpush(history.commit_order("topic:a"), "0:2", "1:2", "2:1")  # seq 2 under an old fence
    private_redis.hset(keys.stats, "fenceRejected", 3)
    found = check_history(private_redis, prefix, accepted)
    assert (found.lost, found.applied_twice, found.order_violations) == (1, 1, 1)
    assert (found.stale_commits, found.fence_rejections, found.done, found.dead) == (1, 3, 3, 0)
    assert not found.ok
