"""One scenario's world (:class:`ChaosRun`): its private Redis, settings, workers, proxies, receiver and
workload, and the final check. The parts live in ``processes.py``, ``receiver.py`` and ``checker.py``.

Nothing here touches a shared server: every run starts its own ``redis-server`` on a free loopback port
(``--appendonly yes --appendfsync always`` in a private directory, so a SIGKILLed server restarts with every
acknowledged write), and workers reach it directly or through a :class:`TcpProxy` the scenario can cut. The
workload's external effects (its outbox records) go to a :class:`Receiver`, an HTTP server in this process
that no fault touches and that dedupes on ``Idempotency-Key``.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

from redis import Redis

from tests.chaos.checker import Accepted, Row, check_history
from tests.chaos.history_plugin import OP_TYPE, RECEIVER_ENV, SOURCE_TYPES, HistoryKeys
from tests.chaos.processes import RedisServer, TcpProxy, WorkerProc, wait_until
from tests.chaos.receiver import Receipts, Receiver
from tests.conftest import worker_argv
from worker.keys.layout import BucketKeys
from worker.settings import Settings, settings_environment

__all__ = ["CHAOS_SETTINGS", "ChaosRun", "op_events"]

ROOT = Path(__file__).resolve().parents[2]

# Short leases so faults resolve in seconds (tests/conftest.py FAST, with room for repeated crashes).
CHAOS_SETTINGS: dict[str, Any] = {
    "lease_ttl_s": 2.0,
    "lease_renew_interval_s": 0.5,
    "max_attempts": 8,
    "retry_base_ms": 50,
    "retry_cap_ms": 200,
    "reconcile_interval_s": 0.5,
    "task_soft_time_limit_s": 60,
    "task_time_limit_s": 70,
    "visibility_timeout_s": 120,
    "telemetry_enabled": False,
    "plugins": ["tests.chaos.history_plugin:plugin"],
    "extra_source_types": list(SOURCE_TYPES),
    "env": "test",
    "max_events_per_drain": 25,
    # A relay killed mid-delivery leaves its claim for outbox_lease_ms: keep that (and the backoff) short.
    "outbox_poll_interval_s": 0.1,
    "outbox_lease_ms": 3000,
    "outbox_delivery_timeout_s": 2.0,  # below the lease (check_settings)
    "outbox_retry_base_ms": 50,
    "outbox_retry_cap_ms": 500,
}


def op_events(
    count: int,
    scopes: int,
    *,
    tag: str,
    sleep_ms: int = 20,
    start: int = 0,
    source_type: str = OP_TYPE,
    payload: Callable[[int], dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """``count`` events spread over ``scopes`` scopes; ``seq`` grows in enqueue order within each scope;
    ``payload(seq)`` adds fields (a long sleep, ``poison``) to chosen events."""
    return [
        {
            "sourceType": source_type,
            "sourceId": f"{tag}-{i}",
            "scopeKey": f"topic:{tag}-{i % scopes}",
            "payload": {"seq": i, "sleepMs": sleep_ms, **(payload(i) if payload is not None else {})},
        }
        for i in range(start, start + count)
    ]


class ChaosRun:
    """One scenario's world: a private Redis, a key prefix, workers, a producer, and the final check."""

    def __init__(self, name: str, **overrides: Any) -> None:
        self.name = name
        # diagnostics: CHAOS_DIAG_DIR keeps each run's directory (worker logs, receiver log, dumps) there
        self.diag_dir = os.environ.get("CHAOS_DIAG_DIR")
        if self.diag_dir:
            Path(self.diag_dir).mkdir(parents=True, exist_ok=True)
        self.directory = Path(
            tempfile.mkdtemp(prefix=f"agent-signal-chaos-{name}-", dir=self.diag_dir or None)
        )
        self.redis_server = RedisServer(self.directory)
        self.prefix = f"chaos-{name}:"
        self.overrides = overrides
        self.workers: list[WorkerProc] = []
        self.proxies: list[TcpProxy] = []
        self.accepted: dict[str, Accepted] = {}
        self.rng = random.Random(os.environ.get("CHAOS_SEED", name))
        self.started = time.monotonic()
        self._producer: Any = None
        self._admin: Redis | None = None
        self.receiver: Receiver | None = None
        self.keep = False

    def __enter__(self) -> ChaosRun:
        self.redis_server.start()
        self.receiver = Receiver()
        self.started = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- settings and clients ---

    def settings(self, redis_url: str | None = None) -> Settings:
        values: dict[str, Any] = {
            **CHAOS_SETTINGS,
            "redis_url": redis_url or self.redis_server.url,
            "key_prefix": self.prefix,
            "queue_name": self.prefix.rstrip(":"),
            **self.overrides,
        }
        return Settings(**values)

    @property
    def admin(self) -> Redis:
        """A direct client for the harness's own reads (timeouts bounded, reconnects after a restart)."""
        if self._admin is None:
            self._admin = Redis.from_url(
                self.redis_server.url, decode_responses=True, socket_timeout=5, socket_connect_timeout=2
            )
        return self._admin

    @property
    def history(self) -> HistoryKeys:
        return HistoryKeys(BucketKeys(self.prefix).bucket_prefix)

    @property
    def keys(self) -> BucketKeys:
        return BucketKeys(self.prefix)

    @property
    def producer(self) -> Any:
        if self._producer is None:
            from producers import Producer

            self._producer = Producer(self.settings())
        return self._producer

    # --- processes ---

    def proxy(self) -> TcpProxy:
        """A new TCP proxy in front of the run's Redis."""
        proxy = TcpProxy(self.redis_server.port)
        self.proxies.append(proxy)
        return proxy

    def start_worker(
        self, *, concurrency: int = 2, via: TcpProxy | None = None, wait: bool = True
    ) -> WorkerProc:
        """Start ``python -m producers.cli worker`` (through ``via`` when given) and wait until it registered."""
        settings = self.settings(via.url if via is not None else None)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_SIGNAL_")}
        for name in ("REDIS_URL", "BROKER_URL"):
            env.pop(name, None)
        env.update(settings_environment(settings))
        env["PYTHONPATH"] = str(ROOT)
        env["PYTHONUNBUFFERED"] = "1"
        if self.receiver is not None:
            env[RECEIVER_ENV] = self.receiver.url
        name = f"w{len(self.workers)}"
        scratch = (
            self.directory / f"tmp-{name}"
        )  # its temporary files: a killed worker removes none of its own
        scratch.mkdir()
        env["TMPDIR"] = str(scratch)
        log_path = self.directory / f"worker-{name}.log"
        with log_path.open("wb") as log:
            popen = subprocess.Popen(
                worker_argv(concurrency),
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        worker = WorkerProc(popen, log_path, name)
        self.workers.append(worker)
        if wait:
            self.wait_registered(worker, concurrency)
        return worker

    def wait_registered(self, worker: WorkerProc, concurrency: int) -> None:
        """Wait until the worker's master announced itself and its pool children exist."""
        tag = f"agent-signal-{worker.pid}@"

        def up() -> bool:
            if not worker.alive():
                raise AssertionError(f"worker {worker.name} exited:\n{worker.log_tail()}")
            registered = any(str(h).startswith(tag) for h in self.admin.hkeys(self.keys.workers))
            return registered and len(worker.children()) >= concurrency

        wait_until(up, 60, f"worker {worker.name} to register")

    def live_workers(self) -> list[WorkerProc]:
        return [w for w in self.workers if w.alive()]

    def busy(self, among: Sequence[int] | None = None, min_left_s: float = 0.0) -> dict[int, dict[str, Any]]:
        """Processes sleeping in an action (pid → its busy record), optionally among ``among`` pids and with
        at least ``min_left_s`` of the sleep left."""
        now = time.time()
        found: dict[int, dict[str, Any]] = {}
        for pid, raw in self.admin.hgetall(self.history.busy).items():
            record = json.loads(raw)
            left = record["t"] + record["sleepMs"] / 1000 - now
            if (among is None or int(pid) in among) and left >= min_left_s:
                found[int(pid)] = record
        return found

    def wait_busy(
        self,
        among: Callable[[], Sequence[int]] | None = None,
        min_left_s: float = 0.5,
        timeout_s: float = 30,
        spare: Collection[str] = (),
    ) -> tuple[int, dict[str, Any]]:
        """A pid sleeping in an action (with a live lease) among ``among()``, and its busy record; not one
        running an event of ``spare`` (source ids already faulted: killing the redo of one event again and
        again would dead-letter it after max_attempts, rightly, though the workload counts it healthy)."""

        def pick() -> tuple[int, dict[str, Any]] | None:
            candidates = self.busy(among() if among is not None else None, min_left_s)
            for pid, record in sorted(candidates.items()):
                if record["sid"] in spare:
                    continue
                if self.admin.exists(self.keys.lease(record["scope"])):
                    return pid, record
            return None

        return wait_until(pick, timeout_s, "a process holding a lease mid-action")  # type: ignore[no-any-return]

    def all_children(self) -> list[int]:
        return [pid for w in self.live_workers() for pid in w.children()]

    def attempts(self, source_id: str | None = None) -> list[dict[str, Any]]:
        """The probe's attempt records (of one source id when given), oldest first."""
        records = (json.loads(raw) for raw in self.admin.lrange(self.history.attempts, 0, -1))
        return [r for r in records if source_id is None or r["sid"] == source_id]

    def started_fence(self, source_id: str, pid: int) -> int:
        """The fence of ``pid``'s last start of ``source_id`` (0: none): read when a fault is injected, so a
        later start by the same process cannot move it."""
        fences = [int(r["fence"]) for r in self.attempts(source_id) if r["pid"] == pid]
        return fences[-1] if fences else 0

    def taken_over(self, source_id: str, victim: int, fence: int) -> bool:
        """Another process started ``source_id`` under a later fence than ``fence`` (the victim's, when it was
        faulted): it acquired the scope while the event was not yet done. The fence, not the attempt: an event
        walked in a run behind its head was never taken, so its redo is attempt 1 again."""
        return any(r["pid"] != victim and int(r["fence"]) > fence for r in self.attempts(source_id))

    def fence_rejections(self) -> int:
        return int(self.admin.hget(self.keys.stats, "fenceRejected") or 0)

    def wait_fence_rejections(self, at_least: int, timeout_s: float = 30) -> bool:
        """Wait (bounded) until the engine counted ``at_least`` refused (stale-fence) commits."""
        try:
            wait_until(lambda: self.fence_rejections() >= at_least, timeout_s, "refused commits")
            return True
        except AssertionError:
            return False

    # --- the workload ---

    def enqueue(self, events: Sequence[dict[str, Any]], *, batch: int = 50, retry_s: float = 60) -> None:
        """Enqueue ``events`` in batches; a batch that fails (Redis down) is sent again until ``retry_s``."""
        for start in range(0, len(events), batch):
            chunk = events[start : start + batch]
            deadline = time.monotonic() + retry_s
            while True:
                try:
                    results = self.producer.enqueue_many(chunk)
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            for event, result in zip(chunk, results, strict=True):
                if result.status in ("accepted", "duplicate"):
                    seq = int(event["payload"]["seq"])
                    self.accepted[result.event_id] = (event["sourceId"], event["scopeKey"], seq)

    def stream(
        self, tag: str, scopes: int, *, batch: int, gap_s: float, **options: Any
    ) -> Callable[[], None]:
        """Enqueue ``batch`` events (``op_events`` with ``options``) every ``gap_s`` seconds in the background
        until the returned function is called (it stops the feed and waits for the last batch)."""
        stop = threading.Event()

        def run() -> None:
            sent = 0
            while not stop.is_set():
                self.enqueue(op_events(batch, scopes, tag=tag, start=sent, **options), batch=batch)
                sent += batch
                stop.wait(gap_s)

        thread = threading.Thread(target=run, name="chaos-feed", daemon=True)
        thread.start()

        def finish() -> None:
            stop.set()
            thread.join(timeout=120)

        return finish

    def wait_final(self, timeout_s: float) -> bool:
        """Wait (bounded) until every accepted event is done or dead; False when the time ran out."""
        ids = list(self.accepted)

        def final() -> bool:
            pipe = self.admin.pipeline(transaction=False)
            for event_id in ids:
                pipe.hget(self.keys.event(event_id), "state")
            return all(state in ("done", "dead") for state in pipe.execute())

        try:
            wait_until(final, timeout_s, "every accepted event to be final", interval_s=0.2)
            return True
        except AssertionError:
            return False

    def wait_outbox_settled(self, *, stall_s: float, cap_s: float) -> bool:
        """Wait until no outbox record is due; give up when the due count has not dropped for ``stall_s``
        (the relays stopped making progress) or after ``cap_s`` in all. A long run leaves a backlog the
        relays drain at their own pace, so progress, not a fixed time, decides."""
        deadline = time.monotonic() + cap_s
        best, best_at = self.admin.zcard(self.keys.outbox_due), time.monotonic()
        while best:
            now = time.monotonic()
            if now - best_at > stall_s or now > deadline:
                return False
            time.sleep(0.2)
            due = self.admin.zcard(self.keys.outbox_due)
            if due < best:
                best, best_at = due, time.monotonic()
        return True

    def check(self, *, timeout_s: float, poisoned: Collection[str] = ()) -> Row:
        """Wait (bounded) for the end: every event final, then every outbox record settled (the relays run in
        the workers); stop the workers; audit the history and the receiver's effects."""
        finished = self.wait_final(timeout_s)
        settled = finished and self.wait_outbox_settled(stall_s=30, cap_s=timeout_s)
        for worker in self.workers:
            worker.stop()
        receipts = self.receiver.receipts() if self.receiver is not None else Receipts()
        dump_dir = self.directory if self.diag_dir else None
        if dump_dir is not None:
            with (dump_dir / "receiver.jsonl").open("w") as out:
                for entry in receipts.log:
                    out.write(json.dumps(entry) + "\n")
        history = check_history(
            self.admin, self.prefix, self.accepted, poisoned=poisoned, receipts=receipts, dump_dir=dump_dir
        )
        row = Row(self.name, history, time.monotonic() - self.started)
        if dump_dir is not None:
            self.keep = True
            (dump_dir / "row.json").write_text(
                json.dumps(
                    {
                        "ok": row.ok,
                        "events": history.events,
                        "deliveries": history.deliveries,
                        "incomplete": receipts.incomplete,
                        "effectsLost": history.effects_lost,
                        "effectsTwice": history.effects_twice,
                        "problems": history.problems,
                    },
                    indent=1,
                )
            )
        if not finished:
            row.expectations.append(
                f"not every event was final after {timeout_s:g}s (logs: {self.directory})"
            )
        elif not settled:
            due = self.admin.zcard(self.keys.outbox_due)
            row.expectations.append(f"{due} outbox record(s) still due (logs: {self.directory})")
        return row

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def close(self) -> None:
        for worker in self.workers:
            worker.stop()
        for proxy in self.proxies:
            proxy.close()
        if self._producer is not None:
            try:
                self._producer.close()
            except Exception:
                pass
        if self._admin is not None:
            self._admin.close()
        if self.receiver is not None:
            self.receiver.close()
        self.redis_server.stop()
        if not self.keep and not os.environ.get("CHAOS_KEEP"):
            shutil.rmtree(self.directory, ignore_errors=True)
