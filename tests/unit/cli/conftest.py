"""Fake HTTP servers for the CLI's tests: ``door`` answers each route with canned JSON (or any bytes);
``trickle`` sends its status line and headers at once, then its body one byte at a time for as long as the client
listens. Both listen on loopback, on a port of their own."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

NAMES = (
    "AGENT_SIGNAL_URL",
    "AGENT_SIGNAL_TOKEN",
    "AGENT_SIGNAL_API_TOKEN",
    "REDIS_URL",
    "AGENT_SIGNAL_REDIS_URL",
)
TRICKLE_PACE_S = 0.1  # far under any read timeout: only a deadline on the whole answer ends it


@pytest.fixture(autouse=True)
def second_terminal(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No URL, credential or Redis from this environment, and a working directory with no stack file."""
    for name in NAMES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)


@dataclass
class Answer:
    status: int
    body: bytes
    content_type: str = "application/json"


@dataclass
class FakeDoor:
    """Canned answers by ``(method, path)`` (the path without its query), else ``default``; ``seen`` keeps
    each request's method, path with query, and JSON body."""

    url: str = ""
    answers: dict[tuple[str, str], Answer] = field(default_factory=dict)
    default: Answer = field(default_factory=lambda: Answer(404, b'{"error":{"code":"not_found"}}'))
    seen: list[tuple[str, str, Any]] = field(default_factory=list)

    def answer(self, method: str, path: str, body: Any, status: int = 200) -> None:
        """``body`` sent as JSON (bytes as they are, as HTML when they start with ``<``)."""
        if isinstance(body, bytes):
            kind = "text/html" if body.startswith(b"<") else "application/json"
            self.answers[method, path] = Answer(status, body, kind)
        else:
            self.answers[method, path] = Answer(status, json.dumps(body).encode())

    def answer_everything(self, body: bytes) -> None:
        self.default = Answer(200, body, "text/html" if body.startswith(b"<") else "application/json")


class _DoorHandler(BaseHTTPRequestHandler):
    server: _DoorServer

    def _any(self) -> None:
        door = self.server.door
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        door.seen.append((self.command, self.path, json.loads(raw) if raw else None))
        found = door.answers.get((self.command, self.path.split("?", 1)[0]), door.default)
        self.send_response(found.status)
        self.send_header("Content-Type", found.content_type)
        self.send_header("Content-Length", str(len(found.body)))
        self.end_headers()
        self.wfile.write(found.body)

    do_GET = do_POST = do_PUT = do_DELETE = _any

    def log_message(self, *args: Any) -> None:
        pass


class _DoorServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, door: FakeDoor) -> None:
        super().__init__(("127.0.0.1", 0), _DoorHandler)
        self.door = door


@contextmanager
def serving(fake: FakeDoor) -> Iterator[FakeDoor]:
    """``fake`` answering on a loopback port of its own (its ``url``) until the block ends."""
    server = _DoorServer(fake)
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def door() -> Iterator[FakeDoor]:
    with serving(FakeDoor()) as fake:
        yield fake


class _TrickleHandler(BaseHTTPRequestHandler):
    server: _TrickleServer

    def _trickle(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "1000000")
        self.end_headers()
        self.wfile.flush()
        while not self.server.stop.wait(TRICKLE_PACE_S):  # the test's end stops it
            try:
                self.wfile.write(b" ")
                self.wfile.flush()
            except OSError:  # the client gave up
                return

    do_GET = do_POST = do_PUT = do_DELETE = _trickle

    def log_message(self, *args: Any) -> None:
        pass


class _TrickleServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _TrickleHandler)
        self.stop = threading.Event()


@pytest.fixture
def trickle() -> Iterator[int]:
    """The port of a server that answers 200 and then its body one byte every 0.1 s, never ending."""
    server = _TrickleServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.stop.set()
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)
