"""The workload's external-effect receiver: an HTTP server in the battery's own process (no fault touches
it) that counts deliveries per ``Idempotency-Key`` and applies each key's effect once."""

from __future__ import annotations

import json
import threading
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


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
