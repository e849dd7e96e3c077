"""The ten fault scenarios; each takes ``long`` (the ``make chaos`` variant) and returns its table row.

Every scenario starts a private Redis with AOF and real worker processes (:class:`ChaosRun`), enqueues a
known ``chaos.op`` workload through ``producers.Producer`` (its handlers batch-safe: a scope's events commit in
runs, the next run walked while a commit is in flight; the paused-holder and partition scenarios run them one
by one, see tests/chaos/history_plugin.py), injects its fault, waits (bounded) until every
accepted event is done or dead and every outbox record settled, and audits the history and the receiver's
effects (:func:`check_history`). Short variants inject one fault on a small workload; long ones repeat the
fault under a steady feed. Every wait is bounded and ends on a signal (a busy probe, a takeover, a refused
commit, an attempt count), never on a fixed sleep before asserting that something did not happen.
"""

from __future__ import annotations

import os
import signal
import time
import traceback
from collections.abc import Callable, Collection, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from tests.chaos.checker import History, Row
from tests.chaos.harness import ChaosRun, op_events
from tests.chaos.history_plugin import FLAKY_TYPE, ONE_BY_ONE
from tests.chaos.processes import wait_until

__all__ = ["SCENARIOS", "run_scenario"]

Scenario = Callable[..., Row]

SHORT_TIMEOUT_S = 60.0
LONG_TIMEOUT_S = 240.0
TAKEOVER_TIMEOUT_S = 30.0  # a faulted holder's lease (2 s) runs out and another process takes the event
PARTITION_TIMEOUT_S = 15.0  # under the workers' socket timeout (10 s, retried once): the cut-off side waits


def _timeout(long: bool) -> float:
    return LONG_TIMEOUT_S if long else SHORT_TIMEOUT_S


def _every(n: int, **fields: Any) -> Callable[[int], dict[str, Any]]:
    """A payload function adding ``fields`` to every ``n``-th event. Events go round-robin over the scopes, so
    ``n`` coprime to the scope count spreads the chosen ones over every scope; a multiple of it put them all on
    one scope, drained by whichever worker held it (the long partition waited for a long action behind its
    proxy that the other worker kept running)."""
    return lambda seq: dict(fields) if seq % n == n - 1 else {}


def _expect_takeover(run: ChaosRun, row: Row, victim: int, record: dict[str, Any]) -> None:
    """The event a faulted process held (``record``: its busy record, with the fence it ran under) was started
    again by another process (the fault mattered)."""
    if not run.taken_over(record["sid"], victim, record["fence"]):
        row.expectations.append(f"nobody took {record['sid']} over from the faulted process {victim}")


def _victim(run: ChaosRun, pid: int, record: dict[str, Any]) -> dict[str, Any]:
    """The busy record of the process about to be faulted, with the fence it started the event under."""
    return {**record, "fence": run.started_fence(record["sid"], pid)}


def _wait_takeover(run: ChaosRun, victim: int, record: dict[str, Any], timeout_s: float) -> bool:
    """Wait (bounded) until another process started the event of ``record`` again: its scope's fence has moved
    past the one ``victim`` held, so the victim's late commit must be refused."""
    sid = record["sid"]
    try:
        wait_until(lambda: run.taken_over(sid, victim, record["fence"]), timeout_s, f"a takeover of {sid}")
        return True
    except AssertionError:
        return False


def _gone(pid: int) -> bool:
    """The process is dead (reaped, or a zombie waiting for its parent)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith(("Z", "X"))
    except (OSError, IndexError):
        return True


def _kill_mid_action(
    run: ChaosRun,
    among: Callable[[], list[int]],
    kill: Callable[[int], None],
    *,
    min_left_s: float,
    spare: Collection[str] = (),
) -> tuple[int, dict[str, Any]]:
    """Kill (``kill(pid)``) a process sleeping in a long action and confirm the kill landed mid-action: a
    process killed in its sleep never removes its ``chaos:busy`` entry. Tries another target when it did
    not land (bounded: 5 tries); returns the victim's pid and busy record (with the fence it started the event
    under). ``spare``: source ids faulted
    before, left alone (each event is faulted at most once, so a healthy one never runs out of attempts)."""
    for _ in range(5):
        pid, busy = run.wait_busy(among, min_left_s=min_left_s, spare=spare)
        record = _victim(run, pid, busy)
        kill(pid)
        wait_until(partial(_gone, pid), 10, f"process {pid} to die")
        if run.admin.hexists(run.history.busy, str(pid)):
            return pid, record
    raise AssertionError("5 kills in a row landed outside an action")


def _load(run: ChaosRun, tag: str, long: bool, *, scopes: int, **options: Any) -> Callable[[], None]:
    """The workload: short variants enqueue 10 events per scope up front; long ones stream 2 per scope every
    half second until the returned function is called (so every fault of the series lands under load)."""
    if long:
        return run.stream(tag, scopes, batch=2 * scopes, gap_s=0.5, **options)
    run.enqueue(op_events(10 * scopes, scopes, tag=tag, **options))
    return lambda: None


def child_kill(*, long: bool) -> Row:
    """1. SIGKILL a pool child in the middle of a (long) action, under load; another process redoes it."""
    with ChaosRun("child-kill") as run:
        workers = [run.start_worker(concurrency=2, wait=False) for _ in range(2 if long else 1)]
        for worker in workers:
            run.wait_registered(worker, 2)
        victims: list[tuple[int, dict[str, Any]]] = []

        def sigkill(pid: int) -> None:
            os.kill(pid, signal.SIGKILL)

        if long:
            finish = run.stream("ck", 16, batch=32, gap_s=0.5, sleep_ms=20, payload=_every(67, sleepMs=1000))
        else:
            run.enqueue(op_events(40, 4, tag="ck", sleep_ms=30, payload=_every(9, sleepMs=1500)))
            finish = lambda: None  # noqa: E731
        for _ in range(10 if long else 1):
            pid, record = _kill_mid_action(
                run, run.all_children, sigkill, min_left_s=0.5, spare={r["sid"] for _, r in victims}
            )
            victims.append((pid, record))
            _wait_takeover(run, pid, record, TAKEOVER_TIMEOUT_S)
        finish()
        row = run.check(timeout_s=_timeout(long))
        for pid, record in victims:
            _expect_takeover(run, row, pid, record)
        return row


def worker_kill(*, long: bool) -> Row:
    """2. SIGKILL a whole worker (master and children) mid-action, then start a replacement."""
    with ChaosRun("worker-kill") as run:
        workers = [run.start_worker(concurrency=2, wait=False) for _ in range(3 if long else 2)]
        for worker in workers:
            run.wait_registered(worker, 2)
        finish = _load(
            run,
            "wk",
            long,
            scopes=12 if long else 4,
            sleep_ms=20 if long else 30,
            payload=_every(49 if long else 9, sleepMs=1000 if long else 1500),
        )
        victims: list[tuple[int, dict[str, Any]]] = []

        def kill_worker(pid: int) -> None:
            worker = next(w for w in run.live_workers() if pid in w.children())
            if run.diag_dir:  # diagnostics: when each whole worker was killed
                with (run.directory / "kills.txt").open("a") as out:
                    out.write(f"{time.time():.6f} kill {worker.name} master={worker.pid} busy-child={pid}\n")
            worker.kill_all()

        for _ in range(3 if long else 1):
            pid, record = _kill_mid_action(
                run, run.all_children, kill_worker, min_left_s=0.5, spare={r["sid"] for _, r in victims}
            )
            victims.append((pid, record))
            run.start_worker(concurrency=2)
        finish()
        row = run.check(timeout_s=_timeout(long))
        for pid, record in victims:
            _expect_takeover(run, row, pid, record)
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


def _expect_refused(run: ChaosRun, notes: list[str], victims: int) -> None:
    """Each faulted holder whose event was taken over had its late commit refused: once it runs again its
    next fenced write (APPLY of the action, or the event's COMMIT when the new holder applied the action
    first) carries the old fence, which the takeover's ACQUIRE moved on; so wait (bounded) for the count."""
    if not run.wait_fence_rejections(victims):
        notes.append(f"{run.fence_rejections()} refused commit(s) for {victims} faulted holder(s)")


def _faults_until_takeover(
    run: ChaosRun,
    finish: Callable[[], None],
    *,
    long: bool,
    busy_in: Callable[[], Sequence[int]],
    inject: Callable[[int], None],
    heal: Callable[[int], None],
    takeover_timeout_s: float,
    refused: bool = True,
) -> Row:
    """Fault a busy lease holder (``inject(pid)``) until another process took its event over, then
    ``heal(pid)``: each late commit must be refused (``refused``; else the holder may also find its lease lost
    and write nothing). Then finish the workload and check the run."""
    victims: list[tuple[int, dict[str, Any]]] = []
    notes: list[str] = []
    owed = 0  # late commits that must have been refused so far
    for _ in range(3 if long else 1):
        pid, busy = run.wait_busy(busy_in, min_left_s=0.8)
        record = _victim(run, pid, busy)
        inject(pid)
        try:
            took = _wait_takeover(run, pid, record, takeover_timeout_s)
        finally:
            heal(pid)
        victims.append((pid, record))
        owed += took  # a victim nobody took over is reported by _expect_takeover below
        if took and refused:
            _expect_refused(run, notes, owed)
    finish()
    row = run.check(timeout_s=_timeout(long))
    row.expectations += notes
    for pid, record in victims:
        _expect_takeover(run, row, pid, record)
    return row


def paused_holder(*, long: bool) -> Row:
    """5. SIGSTOP a child that holds a lease mid-action until another process took its event over, then
    SIGCONT it: its late commit must be refused (one fence rejection per pause)."""
    with ChaosRun("paused-holder", plugins=[ONE_BY_ONE]) as run:  # a late write reaches the fence
        return _pause_holders(run, "ph", long=long, refused=True)


def paused_run(*, long: bool) -> Row:
    """5b. The paused holder of a run: SIGSTOP a child mid-action while it walks a run of batch-safe events (the
    events behind its head not taken yet, their actions waiting for the run's COMMIT) until another process took
    its event over, then SIGCONT it. Nothing of the run may land twice or out of order; its late COMMIT is refused
    by the fence, or never sent (its renewer found the lease lost first), so no refusal is required."""
    with ChaosRun("paused-run") as run:
        return _pause_holders(run, "pr", long=long, refused=False)


def _pause_holders(run: ChaosRun, tag: str, *, long: bool, refused: bool) -> Row:
    """The pause scenarios' workload and faults: SIGSTOP a busy holder until a takeover, then SIGCONT."""
    workers = [run.start_worker(concurrency=2, wait=False) for _ in range(2 if long else 1)]
    for worker in workers:
        run.wait_registered(worker, 2)
    payload = _every(41 if long else 10, sleepMs=1500)
    finish = _load(run, tag, long, scopes=8 if long else 3, sleep_ms=30, payload=payload)
    return _faults_until_takeover(
        run,
        finish,
        long=long,
        busy_in=run.all_children,
        inject=lambda pid: os.kill(pid, signal.SIGSTOP),
        heal=lambda pid: os.kill(pid, signal.SIGCONT),
        takeover_timeout_s=TAKEOVER_TIMEOUT_S,
        refused=refused,
    )


def partitioned_worker(*, long: bool) -> Row:
    """6. Partition one worker from Redis (a proxy stops moving bytes) mid-action until another worker took
    its event over, then heal it: its late commit must be refused (one fence rejection per partition)."""
    with ChaosRun("partition", plugins=[ONE_BY_ONE]) as run:  # a late write reaches the fence
        proxy = run.proxy()
        direct = run.start_worker(concurrency=2, wait=False)
        cut_off = run.start_worker(concurrency=2, via=proxy, wait=False)
        for worker in (direct, cut_off):
            run.wait_registered(worker, 2)
        payload = _every(33 if long else 8, sleepMs=1500)
        finish = _load(run, "pt", long, scopes=8 if long else 3, sleep_ms=30, payload=payload)
        return _faults_until_takeover(
            run,
            finish,
            long=long,
            busy_in=cut_off.children,
            inject=lambda pid: proxy.cut(hard=False),
            heal=lambda pid: proxy.restore(),
            takeover_timeout_s=PARTITION_TIMEOUT_S,
        )


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
            payload=_every(49 if long else 6, sleepMs=2500),
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
        row = run.check(timeout_s=_timeout(long), poisoned=poisoned)
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
    """9. Many events fail transiently (``test.flaky`` until ``test:fixed``): the storm lasts until every
    flaky scope's head failed ``N`` times and every healthy event is done, then all recover, none dead."""
    with ChaosRun("retry-storm", retry_base_ms=500, retry_cap_ms=4000, max_attempts=60) as run:
        workers = [run.start_worker(concurrency=2, wait=False) for _ in range(2 if long else 1)]
        for worker in workers:
            run.wait_registered(worker, 2)
        flaky = op_events(
            200 if long else 20, 40 if long else 5, tag="rsf", sleep_ms=0, source_type=FLAKY_TYPE
        )
        healthy = op_events(100 if long else 10, 10 if long else 2, tag="rsh", sleep_ms=10)
        run.enqueue(flaky + healthy)
        failures_each = 5 if long else 3
        flaky_scopes = {e["scopeKey"] for e in flaky}
        healthy_ids = [eid for eid, (sid, _, _) in run.accepted.items() if sid.startswith("rsh-")]

        def stormed() -> bool:
            """Every flaky scope's head was attempted ``failures_each`` times (all failed: not fixed yet),
            and the healthy scopes beside them finished."""
            worst = {scope: 0 for scope in flaky_scopes}
            for r in run.attempts():
                if r["scope"] in worst:
                    worst[r["scope"]] = max(worst[r["scope"]], r["attempt"])
            states = [run.admin.hget(run.keys.event(eid), "state") for eid in healthy_ids]
            return min(worst.values()) >= failures_each and all(state == "done" for state in states)

        storm = ""
        try:
            wait_until(stormed, _timeout(long) / 2, "the storm", interval_s=0.2)
        except AssertionError as exc:
            storm = f"no storm: {exc}"
        failures = sum(1 for r in run.attempts() if r["sid"].startswith("rsf-"))
        run.admin.set(run.history.fixed, "1")
        row = run.check(timeout_s=_timeout(long))
        if storm:
            row.expectations.append(f"{storm} ({failures} flaky attempts)")
        return row


SCENARIOS: dict[str, Scenario] = {
    "child-kill": child_kill,
    "worker-kill": worker_kill,
    "rolling-sigterm": rolling_restart,
    "redis-restart": redis_restart,
    "paused-holder": paused_holder,
    "paused-run": paused_run,
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
