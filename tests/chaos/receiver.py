"""The workload's external-effect receiver: an HTTP server in the battery's own process (no fault touches
it) that counts deliveries per ``Idempotency-Key`` and applies each key's effect once.

A request counts only when it arrived whole: a worker SIGKILLed mid-POST (worker-kill kills the master, whose
relay delivers) can leave its headers on the wire without its body (httpcore writes them apart), and its
connection then ends at EOF. Read as ``{}``, that request once applied the key's effect under no source id, and
the relay's redelivery of the same record (the claim lapsed) was then a repeat: the checker reported the event's
effect lost (``delivered``, no effect, one more delivery than events). A real receiver never acts on a request
it did not get whole, and the sender, which had no answer, sends it again."""

from __future__ import annotations

import json
import threading
import time
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
    # diagnostics: every request in arrival order (key, sid, time, response, Content-Length, bytes read, peer)
    log: list[dict[str, Any]] = field(default_factory=list)
    # requests whose sender went away before the body arrived whole: no delivery, no effect
    incomplete: int = 0


class Receiver:
    """The workload's outside world: an HTTP endpoint that dedupes on ``Idempotency-Key``.

    Every whole POST counts as a delivery; the first one of a key that names its source id (the body's ``sid``)
    applies the effect (counted per key, with that source id). A second effect of one event can only show up
    under a second key. A request cut short (module docstring) is neither."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._deliveries: Counter[str] = Counter()
        self._effects: Counter[str] = Counter()
        self._sid_of: dict[str, str] = {}
        self._log: list[dict[str, Any]] = []
        self._incomplete = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                key = self.headers.get("Idempotency-Key", "")
                length = int(self.headers.get("Content-Length", 0))
                entry: dict[str, Any] = {
                    "key": key,
                    "t": time.time(),
                    "length": length,
                    "peer": f"{self.client_address[0]}:{self.client_address[1]}",
                }
                try:
                    raw = self.rfile.read(length)
                except OSError as exc:  # reset mid-body: cut short too
                    raw, entry["error"] = b"", f"{type(exc).__name__}: {exc}"
                entry["read"] = len(raw)
                entry["raw"] = raw[:200].decode(errors="replace")
                if len(raw) < length:  # the sender went away mid-request: nothing arrived, nothing to answer
                    receiver._cut_short(entry)
                    self.close_connection = True
                    return
                try:
                    body = json.loads(raw) if raw else {}
                except ValueError as exc:
                    entry["error"] = f"{type(exc).__name__}: {exc}"
                    body = {}
                sid = body.get("sid") if isinstance(body, dict) else None
                whole = bool(key) and isinstance(sid, str) and bool(sid)
                entry["sid"], entry["status"] = str(sid or ""), 200 if whole else 400
                receiver._receive(key, str(sid or ""), entry, apply=whole)
                self.send_response(200 if whole else 400)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self._thread = threading.Thread(target=self.server.serve_forever, name="receiver", daemon=True)
        self._thread.start()

    def _cut_short(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self._incomplete += 1
            entry["incomplete"], entry["applied"] = True, False
            self._log.append(entry)

    def _receive(
        self, key: str, sid: str, entry: dict[str, Any] | None = None, *, apply: bool = True
    ) -> None:
        with self._lock:
            self._deliveries[key] += 1
            applied = bool(apply and key and self._effects[key] == 0)
            if applied:
                self._effects[key] = 1
                self._sid_of[key] = sid
            if entry is not None:
                entry["applied"] = applied
                self._log.append(entry)

    def receipts(self) -> Receipts:
        with self._lock:
            return Receipts(
                dict(self._deliveries),
                dict(self._effects),
                dict(self._sid_of),
                [dict(e) for e in self._log],
                self._incomplete,
            )

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
