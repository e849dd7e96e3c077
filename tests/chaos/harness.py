"""The battery's machinery: a private Redis with AOF, real worker processes, a TCP proxy, and the checker.

Nothing here touches a shared server: every run starts its own ``redis-server`` on a free loopback port
(``--appendonly yes --appendfsync always`` in a private directory, so a SIGKILLed server restarts with every
acknowledged write), and workers reach it directly or through a :class:`TcpProxy` the scenario can cut. The
workload's external effects (its outbox records) go to a :class:`Receiver`, an HTTP server in this process
that no fault touches and that dedupes on ``Idempotency-Key``.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from redis import Redis
from redis.exceptions import RedisError

from tests.chaos.history_plugin import OP_TYPE, RECEIVER_ENV, SOURCE_TYPES, HistoryKeys
from worker.keys import Keys
from worker.outbox import records_of_event
from worker.settings import Settings, settings_environment

__all__ = [
    "ChaosRun",
    "History",
    "Receipts",
    "Receiver",
    "RedisServer",
    "TcpProxy",
    "WorkerProc",
    "check_history",
    "format_table",
    "free_port",
    "op_events",
    "wait_until",
]

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
    "outbox_retry_base_ms": 50,
    "outbox_retry_cap_ms": 500,
}


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(predicate: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.05) -> Any:
    """Poll ``predicate`` until it is truthy; raise AssertionError naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = predicate()
        except (RedisError, OSError):
            value = None
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what}")
        time.sleep(interval_s)


class RedisServer:
    """A private ``redis-server`` with AOF (fsync always) on a free port; killable and restartable in place."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.popen: subprocess.Popen[bytes] | None = None
        self.log_path = directory / "redis.log"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start (or restart) the server on the same port and directory, and wait until it answers."""
        self.popen = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--dir",
                str(self.directory),
                "--logfile",
                str(self.log_path),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=1)
        try:
            wait_until(lambda: self._loaded(client), 30, "the private Redis to answer")
        finally:
            client.close()

    def _loaded(self, client: Redis) -> bool:
        if self.popen is not None and self.popen.poll() is not None:
            raise AssertionError(f"redis-server exited: {self.log_path.read_text(errors='replace')[-2000:]}")
        return bool(client.ping()) and client.info("persistence").get("loading") == 0

    def kill(self) -> None:
        """SIGKILL the server (no shutdown save: what survives is what the AOF holds)."""
        if self.popen is not None and self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(timeout=10)

    def stop(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=10)


class TcpProxy:
    """A loopback TCP proxy in threads; ``cut()`` partitions whoever connects through it, ``restore()`` heals.

    ``cut(hard=True)`` resets every connection and refuses new ones (a broker or server that went away);
    ``cut(hard=False)`` stops moving bytes but keeps the connections open (packets dropped on a partition,
    retransmitted when it heals): the clients block until ``restore()``, then everything flows again.
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = free_port()
        self._flowing = threading.Event()
        self._flowing.set()
        self._refusing = False
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._closed = False
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._thread = threading.Thread(target=self._accept_forever, name="proxy-accept", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _accept_forever(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._refusing:
                _close(client)
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._sockets.update((client, upstream))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), name="proxy-pump", daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                self._flowing.wait()
                data = src.recv(65536)
                if not data:
                    break
                self._flowing.wait()
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                _close(s)
                with self._lock:
                    self._sockets.discard(s)

    def cut(self, *, hard: bool) -> None:
        """Partition: ``hard`` resets connections and refuses new ones; otherwise bytes stop moving."""
        if hard:
            self._refusing = True
            with self._lock:
                victims = list(self._sockets)
                self._sockets.clear()
            for s in victims:
                _close(s)
        else:
            self._flowing.clear()

    def restore(self) -> None:
        """Heal the partition."""
        self._refusing = False
        self._flowing.set()

    def close(self) -> None:
        self._closed = True
        self.restore()
        _close(self._listener)
        with self._lock:
            victims = list(self._sockets)
            self._sockets.clear()
        for s in victims:
            _close(s)


@dataclass(frozen=True)
class Receipts:
    """What the receiver saw: deliveries and effects per idempotency key, and the source id of each key."""

    deliveries: dict[str, int] = field(default_factory=dict)
    effects: dict[str, int] = field(default_factory=dict)
    sid_of: dict[str, str] = field(default_factory=dict)


class Receiver:
    """The workload's outside world: an HTTP endpoint that dedupes on ``Idempotency-Key``.

    Every POST counts as a delivery; the first one of a key applies the effect (counted per key, with the
    source id from the body). A second effect of one event can only show up under a second key."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._deliveries: Counter[str] = Counter()
        self._effects: Counter[str] = Counter()
        self._sid_of: dict[str, str] = {}
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                key = self.headers.get("Idempotency-Key", "")
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                receiver._receive(key, str(body.get("sid", "")))
                self.send_response(200 if key else 400)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self._thread = threading.Thread(target=self.server.serve_forever, name="receiver", daemon=True)
        self._thread.start()

    def _receive(self, key: str, sid: str) -> None:
        with self._lock:
            self._deliveries[key] += 1
            if key and self._effects[key] == 0:
                self._effects[key] = 1
                self._sid_of[key] = sid

    def receipts(self) -> Receipts:
        with self._lock:
            return Receipts(dict(self._deliveries), dict(self._effects), dict(self._sid_of))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass


@dataclass
class WorkerProc:
    """One ``agent-signal worker`` (Celery prefork master + children) in its own process group."""

    popen: subprocess.Popen[bytes]
    log_path: Path
    name: str

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def children(self) -> list[int]:
        """The pool processes (the master's direct children)."""
        try:
            return [int(x) for x in Path(f"/proc/{self.pid}/task/{self.pid}/children").read_text().split()]
        except OSError:
            return []

    def kill_all(self) -> None:
        """SIGKILL the master and its children at once (the whole process group)."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.popen.wait(timeout=10)

    def terminate(self, timeout_s: float = 60.0) -> None:
        """SIGTERM the master (Celery's warm shutdown: running tasks finish) and wait for it to exit."""
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.kill_all()
        self._reap_group()

    def _reap_group(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGCONT)
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self) -> None:
        """Stop whatever is left of this worker (resumes paused children first)."""
        self.terminate(timeout_s=20)

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""


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


Accepted = tuple[str, str, int]  # (sourceId, scope, seq) of an accepted event


@dataclass
class History:
    """What the checker found for one scenario."""

    events: int = 0
    done: int = 0
    dead: int = 0
    expected_dead: int = 0  # the poisoned events: exactly these, and only these, must end dead
    dead_mismatch: int = 0  # healthy events that died, plus poisoned ones that did not
    lost: int = 0
    applied_twice: int = 0
    order_violations: int = 0
    fence_rejections: int = 0
    stale_commits: int = 0
    effects_lost: int = 0  # done events whose effect never reached the receiver (or was not delivered)
    effects_twice: int = 0  # events with more than one effect at the receiver (one key twice, or two keys)
    deliveries: int = 0  # raw deliveries (at least once: may exceed the effects)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (
            self.lost
            or self.applied_twice
            or self.order_violations
            or self.stale_commits
            or self.dead_mismatch
            or self.effects_lost
            or self.effects_twice
        )


def check_history(
    redis: Redis,
    prefix: str,
    accepted: dict[str, Accepted],
    *,
    poisoned: Collection[str] = (),
    receipts: Receipts | None = None,
) -> History:
    """Audit the history of the ``accepted`` events on the run's Redis (and, given ``receipts``, their effects).

    dead: must be exactly the ``poisoned`` source ids (none elsewhere); lost: accepted, not dead, and not
    (done with its action applied); applied twice: an effect counter above 1; order: adjacent entries of a
    scope's applied-order (or commit-order) list whose seq does not grow; stale commits: a done commit whose
    fence is not the number its event was last taken with, or lower than a commit before it on the same
    scope; fence rejections: the engine's ``fenceRejected`` counter; effects lost: a done event without
    exactly one delivered outbox record and one effect at the receiver; effects twice: an event with more
    than one effect at the receiver."""
    keys, history = Keys(prefix), HistoryKeys(prefix)
    found = History(events=len(accepted))
    ids = list(accepted)
    pipe = redis.pipeline(transaction=False)
    for event_id in ids:
        pipe.hmget(keys.event(event_id), "state", "fence")
    records = dict(zip(ids, pipe.execute(), strict=True))
    states = {sid: records[event_id][0] for event_id, (sid, _, _) in accepted.items()}
    final_fence = {sid: records[event_id][1] or "" for event_id, (sid, _, _) in accepted.items()}
    _check_final(redis, history, states, set(poisoned), found)
    _check_order_and_fences(redis, history, accepted, final_fence, found)
    found.fence_rejections = int(redis.hget(keys.stats, "fenceRejected") or 0)
    if receipts is not None:
        _check_effects(redis, keys, accepted, states, receipts, found)
    return found


def _check_final(
    redis: Redis, history: HistoryKeys, states: dict[str, str | None], poisoned: set[str], found: History
) -> None:
    applied = {str(k): int(v) for k, v in redis.hgetall(history.applied).items()}
    committed = {str(k): int(v) for k, v in redis.hgetall(history.committed).items()}
    found.expected_dead = len(poisoned & set(states))
    for sid, state in states.items():
        if (state == "dead") != (sid in poisoned):
            found.dead_mismatch += 1
            found.problems.append(f"{'poisoned' if sid in poisoned else 'healthy'} {sid} ended {state}")
        if state == "dead":
            found.dead += 1
            continue
        if state == "done":
            found.done += 1
        if state != "done" or applied.get(sid, 0) < 1 or committed.get(sid, 0) < 1:
            found.lost += 1
            found.problems.append(f"lost {sid}: state={state} applied={applied.get(sid, 0)}")
    twice = {sid for sid, n in applied.items() if n > 1} | {sid for sid, n in committed.items() if n > 1}
    found.applied_twice = len(twice)
    found.problems += [f"applied twice: {sid}" for sid in sorted(twice)]


def _check_order_and_fences(
    redis: Redis,
    history: HistoryKeys,
    accepted: dict[str, Accepted],
    final_fence: dict[str, str],
    found: History,
) -> None:
    sid_of = {(scope, seq): sid for sid, scope, seq in accepted.values()}
    for scope in sorted({scope for _, scope, _ in accepted.values()}):
        seqs = [int(x) for x in redis.lrange(history.order(scope), 0, -1)]
        commits = [str(entry).split(":") for entry in redis.lrange(history.commit_order(scope), 0, -1)]
        for series in (seqs, [int(seq) for seq, _ in commits]):
            bad = sum(1 for a, b in itertools.pairwise(series) if b <= a)
            found.order_violations += bad
            if bad:
                found.problems.append(f"order {scope}: {series}")
        highest = 0
        for seq, fence in commits:
            stale = int(fence) < highest or final_fence.get(sid_of.get((scope, int(seq)), ""), fence) != fence
            highest = max(highest, int(fence))
            if stale:
                found.stale_commits += 1
                found.problems.append(f"stale commit {scope} seq={seq} fence={fence}")


def _check_effects(
    redis: Redis,
    keys: Keys,
    accepted: dict[str, Accepted],
    states: dict[str, str | None],
    receipts: Receipts,
    found: History,
) -> None:
    """Invariant 8: one effect per event at the deduping receiver, however often it was delivered. The
    event's outbox records are read as its run detail reads them (``records_of_event``), not by layout."""
    store = cast(Any, SimpleNamespace(client=redis, keys=keys))
    effects: Counter[str] = Counter()
    for key, n in receipts.effects.items():
        effects[receipts.sid_of.get(key, "")] += n
        if n > 1:
            found.effects_twice += 1
            found.problems.append(f"effect applied {n} times under key {key}")
    found.deliveries = sum(receipts.deliveries.values())
    for event_id, (sid, scope, _) in accepted.items():
        if states[sid] == "done":
            records = [str(r.get("state")) for r in records_of_event(store, scope, event_id)]
            if effects[sid] < 1 or not records or any(r != "delivered" for r in records):
                found.effects_lost += 1
                found.problems.append(
                    f"effect lost {sid}: records {records or 'none'}, effects {effects[sid]}"
                )
        if effects[sid] > 1:
            found.effects_twice += 1
            found.problems.append(f"effect applied {effects[sid]} times for {sid}")


@dataclass
class Row:
    """One line of the battery's table."""

    scenario: str
    history: History
    seconds: float
    expectations: list[str] = field(default_factory=list)  # scenario-specific failures

    @property
    def ok(self) -> bool:
        return self.history.ok and not self.expectations


COLUMNS = (
    "scenario",
    "events",
    "dead/poisoned",
    "lost",
    "applied twice",
    "order violations",
    "fence rejections",
    "stale commits",
    "effects lost",
    "effects twice",
    "deliveries",
    "seconds",
)


def format_table(rows: Sequence[Row]) -> str:
    """The table: one row per scenario, then the problems of the rows that failed."""
    cells = [list(COLUMNS)] + [
        [
            r.scenario,
            str(r.history.events),
            f"{r.history.dead}/{r.history.expected_dead}",
            str(r.history.lost),
            str(r.history.applied_twice),
            str(r.history.order_violations),
            str(r.history.fence_rejections),
            str(r.history.stale_commits),
            str(r.history.effects_lost),
            str(r.history.effects_twice),
            str(r.history.deliveries),
            f"{r.seconds:.1f}",
        ]
        for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    for r in rows:
        for problem in [*r.expectations, *r.history.problems][:10]:
            lines.append(f"  {r.scenario}: {problem}")
    return "\n".join(lines)


class ChaosRun:
    """One scenario's world: a private Redis, a key prefix, workers, a producer, and the final check."""

    def __init__(self, name: str, **overrides: Any) -> None:
        self.name = name
        self.directory = Path(tempfile.mkdtemp(prefix=f"agent-signal-chaos-{name}-"))
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
        return HistoryKeys(self.prefix)

    @property
    def keys(self) -> Keys:
        return Keys(self.prefix)

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
        """Start ``python -m producers._cli worker`` (through ``via`` when given) and wait until it registered."""
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
        log_path = self.directory / f"worker-{name}.log"
        with log_path.open("wb") as log:
            popen = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "producers._cli",
                    "worker",
                    "--concurrency",
                    str(concurrency),
                    "--loglevel",
                    "INFO",
                ],
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
        self, among: Callable[[], Sequence[int]] | None = None, min_left_s: float = 0.5, timeout_s: float = 30
    ) -> tuple[int, dict[str, Any]]:
        """A pid sleeping in an action (with a live lease) among ``among()``, and its busy record."""

        def pick() -> tuple[int, dict[str, Any]] | None:
            candidates = self.busy(among() if among is not None else None, min_left_s)
            for pid, record in sorted(candidates.items()):
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

    def taken_over(self, source_id: str, victim: int, attempt: int) -> bool:
        """Another process started ``source_id`` at a later attempt than ``victim``'s: it acquired the scope
        (so its fence moved past the victim's) while the event was not yet done."""
        return any(r["pid"] != victim and r["attempt"] > attempt for r in self.attempts(source_id))

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
        history = check_history(self.admin, self.prefix, self.accepted, poisoned=poisoned, receipts=receipts)
        row = Row(self.name, history, time.monotonic() - self.started)
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
