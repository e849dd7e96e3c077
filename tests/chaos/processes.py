"""The battery's processes: a private ``redis-server`` with AOF on a free loopback port, a TCP proxy a
scenario can cut (a partition), and real worker processes; plus the bounded wait they all use."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redis import Redis
from redis.exceptions import RedisError

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]


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
        self._listener = socket.create_server(("127.0.0.1", 0))  # its port read back: nothing can take it
        self.port = int(self._listener.getsockname()[1])
        self._flowing = threading.Event()
        self._flowing.set()
        self._refusing = False
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._closed = False
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
