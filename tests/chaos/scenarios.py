"""The nine fault scenarios; each takes ``long`` (the ``make chaos`` variant) and returns its table row.

Every scenario starts a private Redis with AOF and real worker processes (:class:`ChaosRun`), enqueues a
known ``chaos.op`` workload through ``producers.Producer``, injects its fault, waits (bounded) until every
accepted event is done or dead, and audits the history (:func:`check_history`). Short variants inject one
fault on a small workload; long ones repeat the fault under a steady feed.
"""

from __future__ import annotations

import json
import os
import signal
import time
import traceback
from collections.abc import Callable
from typing import Any

from tests.chaos.harness import ChaosRun, History, Row, op_events
from tests.chaos.history_plugin import FLAKY_TYPE

__all__ = ["SCENARIOS", "run_scenario"]

Scenario = Callable[..., Row]

SHORT_TIMEOUT_S = 60.0
LONG_TIMEOUT_S = 240.0


def _timeout(long: bool) -> float:
    return LONG_TIMEOUT_S if long else SHORT_TIMEOUT_S


def _every(n: int, **fields: Any) -> Callable[[int], dict[str, Any]]:
    """A payload function adding ``fields`` to every ``n``-th event."""
    return lambda seq: dict(fields) if seq % n == n - 1 else {}


def _attempts_of(run: ChaosRun, source_id: str) -> list[dict[str, Any]]:
    records = (json.loads(raw) for raw in run.admin.lrange(run.history.attempts, 0, -1))
    return [r for r in records if r["sid"] == source_id]


def _expect_takeover(run: ChaosRun, row: Row, source_id: str, victim: int) -> None:
    """The event a faulted process held was started again by another process (the fault mattered)."""
    if not any(r["pid"] != victim and r["attempt"] >= 2 for r in _attempts_of(run, source_id)):
        row.expectations.append(f"nobody took {source_id} over from the faulted process {victim}")


def _expect_redelivery(run: ChaosRun, row: Row) -> None:
    """Some event was started a second time (the killed process's event was redelivered)."""
    records = (json.loads(raw) for raw in run.admin.lrange(run.history.attempts, 0, -1))
    if not any(r["attempt"] >= 2 for r in records):
        row.expectations.append("no event was delivered twice: the fault hit nothing")


def _load(run: ChaosRun, tag: str, long: bool, *, scopes: int, **options: Any) -> Callable[[], None]:
    """The workload: short variants enqueue 10 events per scope up front; long ones stream 2 per scope every
    half second until the returned function is called (so every fault of the series lands under load)."""
    if long:
        return run.stream(tag, scopes, batch=2 * scopes, gap_s=0.5, **options)
    run.enqueue(op_events(10 * scopes, scopes, tag=tag, **options))
    return lambda: None


def child_kill(*, long: bool) -> Row:
    """1. SIGKILL a pool child in the middle of an action, under load."""
    with ChaosRun("child-kill") as run:
        workers = [run.start_worker(concurrency=2, wait=False) for _ in range(2 if long else 1)]
        for worker in workers:
            run.wait_registered(worker, 2)
        if long:
            finish = run.stream("ck", 16, batch=32, gap_s=0.5, sleep_ms=40)
            for _ in range(10):
                pid, _ = run.wait_busy(run.all_children, min_left_s=0.01)
                os.kill(pid, signal.SIGKILL)
                time.sleep(1.0)
            finish()
        else:
            run.enqueue(op_events(40, 4, tag="ck", sleep_ms=100))
            pid, _ = run.wait_busy(run.all_children, min_left_s=0.02)
            os.kill(pid, signal.SIGKILL)
        row = run.check(timeout_s=_timeout(long))
        _expect_redelivery(run, row)
        return row


def worker_kill(*, long: bool) -> Row:
    """2. SIGKILL a whole worker (master and children) that holds a lease, then start a replacement."""
    with ChaosRun("worker-kill") as run:
        workers = [run.start_worker(concurrency=2, wait=False) for _ in range(3 if long else 2)]
        for worker in workers:
            run.wait_registered(worker, 2)
        finish = _load(run, "wk", long, scopes=12 if long else 4, sleep_ms=40 if long else 100)
        for _ in range(3 if long else 1):
            pid, _ = run.wait_busy(run.all_children, min_left_s=0.02)
            victim = next(w for w in run.live_workers() if pid in w.children())
            victim.kill_all()
            run.start_worker(concurrency=2)
        finish()
        row = run.check(timeout_s=_timeout(long))
        _expect_redelivery(run, row)
        return row


def rolling_restart(*, long: bool) -> Row:
    """3. Rolling SIGTERM restarts: each worker in turn shuts down warm and a fresh one replaces it."""
    with ChaosRun("rolling-sigterm") as run:
        workers = [run.start_worker(concurrency=2, wait=False) for _ in range(3 if long else 2)]
        for worker in workers:
            run.wait_registered(worker, 2)
        finish = _load(run, "rr", long, scopes=12 if long else 4, sleep_ms=40 if long else 100)
        for _ in range(6 if long else 1):
            run.wait_busy(run.all_children, min_left_s=0.0)
            oldest = run.live_workers()[0]
            oldest.terminate()
            run.start_worker(concurrency=2)
        finish()
        return run.check(timeout_s=_timeout(long))


def redis_restart(*, long: bool) -> Row:
    """4. SIGKILL the Redis server mid-load and restart it from its AOF (same port, same directory)."""
    with ChaosRun("redis-restart") as run:
        workers = [run.start_worker(concurrency=2, wait=False) for _ in range(2 if long else 1)]
        for worker in workers:
            run.wait_registered(worker, 2)
        finish = _load(run, "rs", long, scopes=12 if long else 4, sleep_ms=40 if long else 100)
        for _ in range(3 if long else 1):
            run.wait_busy(run.all_children, min_left_s=0.02)
            run.redis_server.kill()
            time.sleep(1.0)
            run.redis_server.start()
            time.sleep(2.0 if long else 0.0)
        finish()
        return run.check(timeout_s=_timeout(long))


def paused_holder(*, long: bool) -> Row:
    """5. SIGSTOP a child that holds a lease mid-action for 4 lease TTLs, then SIGCONT it."""
    with ChaosRun("paused-holder") as run:
        workers = [run.start_worker(concurrency=2, wait=False) for _ in range(2 if long else 1)]
        for worker in workers:
            run.wait_registered(worker, 2)
        finish = _load(
            run,
            "ph",
            long,
            scopes=8 if long else 3,
            sleep_ms=30,
            payload=_every(40 if long else 10, sleepMs=1500),
        )
        victims: list[tuple[str, int]] = []
        for _ in range(3 if long else 1):
            pid, record = run.wait_busy(run.all_children, min_left_s=0.8)
            os.kill(pid, signal.SIGSTOP)
            try:
                time.sleep(4 * run.settings().lease_ttl_s)
            finally:
                os.kill(pid, signal.SIGCONT)
            victims.append((record["sid"], pid))
        finish()
        row = run.check(timeout_s=_timeout(long))
        for source_id, pid in victims:
            _expect_takeover(run, row, source_id, pid)
        return row


def partitioned_worker(*, long: bool) -> Row:
    """6. Partition one worker from Redis (a proxy stops moving bytes) past the lease TTL, then heal it."""
    with ChaosRun("partition") as run:
        proxy = run.proxy()
        direct = run.start_worker(concurrency=2, wait=False)
        cut_off = run.start_worker(concurrency=2, via=proxy, wait=False)
        for worker in (direct, cut_off):
            run.wait_registered(worker, 2)
        finish = _load(
            run,
            "pt",
            long,
            scopes=8 if long else 3,
            sleep_ms=30,
            payload=_every(32 if long else 8, sleepMs=1500),
        )
        victims: list[tuple[str, int]] = []
        for _ in range(3 if long else 1):
            pid, record = run.wait_busy(cut_off.children, min_left_s=0.8)
            proxy.cut(hard=False)
            try:
                time.sleep(4 * run.settings().lease_ttl_s)
            finally:
                proxy.restore()
            victims.append((record["sid"], pid))
            time.sleep(1.0)
        finish()
        row = run.check(timeout_s=_timeout(long))
        for source_id, pid in victims:
            _expect_takeover(run, row, source_id, pid)
        return row


def broker_cut(*, long: bool) -> Row:
    """7. Cut every worker's broker (and Redis) connection during a long action, then restore it."""
    with ChaosRun("broker-cut") as run:
        proxy = run.proxy()
        workers = [run.start_worker(concurrency=2, via=proxy, wait=False) for _ in range(2)]
        for worker in workers:
            run.wait_registered(worker, 2)
        finish = _load(
            run,
            "bc",
            long,
            scopes=8 if long else 3,
            sleep_ms=30,
            payload=_every(48 if long else 6, sleepMs=2500),
        )
        for cut_s in [1.0, 3.0, 5.0] if long else [3.0]:
            run.wait_busy(run.all_children, min_left_s=1.5)
            proxy.cut(hard=True)
            try:
                time.sleep(cut_s)
            finally:
                proxy.restore()
            time.sleep(1.0)
        finish()
        return run.check(timeout_s=_timeout(long))


def crash_loop(*, long: bool) -> Row:
    """8. A handler that always raises: those events end dead after max attempts; nothing else is affected."""
    with ChaosRun("crash-loop", max_attempts=3) as run:
        workers = [run.start_worker(concurrency=2, wait=False) for _ in range(2 if long else 1)]
        for worker in workers:
            run.wait_registered(worker, 2)
        events = op_events(
            300 if long else 40, 12 if long else 4, tag="cl", sleep_ms=10, payload=_every(10, poison=True)
        )
        poisoned = {e["sourceId"] for e in events if e["payload"].get("poison")}
        run.enqueue(events)
        row = run.check(timeout_s=_timeout(long))
        _expect_dead_exactly(run, row, poisoned)
        return row


def _expect_dead_exactly(run: ChaosRun, row: Row, poisoned: set[str]) -> None:
    """Only the poisoned events are dead, each after every attempt, with its error and no effect."""
    applied = run.admin.hgetall(run.history.applied)
    for event_id, (source_id, _, _) in run.accepted.items():
        record = {str(k): str(v) for k, v in run.admin.hgetall(run.keys.event(event_id)).items()}
        if source_id in poisoned:
            if record.get("state") != "dead" or record.get("attempts") != "3" or source_id in applied:
                row.expectations.append(
                    f"poisoned {source_id}: {record.get('state')} {record.get('attempts')}"
                )
            elif "poisoned event" not in record.get("error", ""):
                row.expectations.append(f"poisoned {source_id} died of {record.get('error')}")
        elif record.get("state") != "done":
            row.expectations.append(f"healthy {source_id} ended {record.get('state')}: {record.get('error')}")


def retry_storm(*, long: bool) -> Row:
    """9. Many events fail transiently for 20 s (``test.flaky`` until ``test:fixed``), then all recover."""
    with ChaosRun("retry-storm", retry_base_ms=500, retry_cap_ms=4000, max_attempts=60) as run:
        workers = [run.start_worker(concurrency=2, wait=False) for _ in range(2 if long else 1)]
        for worker in workers:
            run.wait_registered(worker, 2)
        flaky = op_events(
            200 if long else 20, 40 if long else 5, tag="rsf", sleep_ms=0, source_type=FLAKY_TYPE
        )
        healthy = op_events(100 if long else 10, 10 if long else 2, tag="rsh", sleep_ms=10)
        run.enqueue(flaky + healthy)
        storm_s = 20.0 if long else 5.0
        time.sleep(storm_s)
        failures = run.admin.llen(run.history.attempts)
        run.admin.set(run.history.fixed, "1")
        row = run.check(timeout_s=_timeout(long))
        if failures <= len(flaky):
            row.expectations.append(f"no storm: {failures} attempts in {storm_s:g}s")
        if row.history.dead:
            row.expectations.append(f"{row.history.dead} events died in the storm")
        return row


SCENARIOS: dict[str, Scenario] = {
    "child-kill": child_kill,
    "worker-kill": worker_kill,
    "rolling-sigterm": rolling_restart,
    "redis-restart": redis_restart,
    "paused-holder": paused_holder,
    "partition": partitioned_worker,
    "broker-cut": broker_cut,
    "crash-loop": crash_loop,
    "retry-storm": retry_storm,
}


def run_scenario(name: str, *, long: bool) -> Row:
    """Run one scenario; a scenario that itself failed (a harness timeout) becomes a failed row."""
    started = time.monotonic()
    try:
        return SCENARIOS[name](long=long)
    except Exception as exc:
        row = Row(name, History(), time.monotonic() - started)
        row.expectations.append(f"scenario failed: {exc!r}")
        row.expectations += traceback.format_exc().splitlines()[-6:]
        return row
