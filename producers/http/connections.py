"""What one web process's connections may hold: a cap on open connections, one client address's share of them,
and deadlines for a request's head and body (``AGENT_SIGNAL_MAX_CONNECTIONS``,
``AGENT_SIGNAL_MAX_CONNECTIONS_PER_CLIENT``, ``AGENT_SIGNAL_HEADER_TIMEOUT_S``, ``AGENT_SIGNAL_BODY_TIMEOUT_S``).

uvicorn has neither deadline: ``timeout_keep_alive`` runs only between requests and is cancelled by the first
byte a client sends, so a client that trickles a request's head, or never sends one, holds its connection (and
a file handle) forever; ``limit_concurrency`` answers *requests* 503 once connections or tasks reach it (so at
the cap every kept-alive client's next request fails too) and never closes an idle connection. Its own issue
for these timeouts (encode/uvicorn#157, ``--timeout-request-start``/``--timeout-request-complete``) is open.
So :func:`door_protocol` subclasses uvicorn's h11 protocol (the one it picks when ``httptools`` is not
installed) with the smallest sound thing (docs/decisions.md "Connection deadlines"):

* **Cap.** A connection accepted while ``max_connections`` are open is answered ``503 too_many_connections``
  (``Retry-After: 1``) and closed at once: the process never holds more connections, or file handles for
  them, than the cap. The cap is lowered to what the process's file-handle limit leaves room for.
* **A client's share.** A connection from an address that holds ``max_connections_per_client`` open already is
  answered ``429 too_many_connections`` (``Retry-After: 1``) and closed: a hostile-caller walk held 2,100 idle
  sockets from one address (each closed at its head deadline and opened again at once), and 70% of another
  tenant's new connections got the 503. The address is the TCP peer's (no header is read before the cap, and
  behind a proxy every client is the proxy's address: raise the share there, or 0 turns it off); a Unix socket's
  clients share none.
* **Head deadline.** A request's head (request line and headers) must be complete ``header_timeout_s`` after
  the connection opened or the previous answer was sent; else the connection closes, with ``408
  request_timeout`` when part of a head had come. The deadline is absolute: bytes trickling in do not extend
  it. (uvicorn's keep-alive timeout, 5 s, still closes an idle kept-alive connection first.)
* **Body deadline.** The body must be complete ``body_timeout_s`` after its head; else the connection closes
  (the route reading it sees the client leave and answers nothing).

A request whose head and body have arrived has no deadline here: answers may take as long as they take (the
receipts stream stays open for hours).
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
from dataclasses import dataclass
from typing import ClassVar, Literal

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from producers.http.settings import DoorSettings

__all__ = ["FILE_HANDLE_RESERVE", "ConnectionLimits", "door_protocol"]

log = logging.getLogger(__name__)

# File handles a web process needs besides its clients' connections: Redis pools (two of
# AGENT_SIGNAL_REDIS_MAX_CONNECTIONS), the broker, the receipts feed, logs, the interpreter's own files.
FILE_HANDLE_RESERVE = 256

Phase = Literal["head", "body"]


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The cap and the deadlines of one web process (from the door's settings, producers/http/settings.py)."""

    max_connections: int
    header_timeout_s: float
    body_timeout_s: float
    max_connections_per_client: int = 0  # 0: none

    @classmethod
    def from_settings(cls, settings: DoorSettings) -> ConnectionLimits:
        """The settings' limits, the cap lowered to what the file-handle limit (``ulimit -n``) leaves room for."""
        cap = settings.max_connections
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        room = soft - FILE_HANDLE_RESERVE if soft != resource.RLIM_INFINITY else cap
        if room < cap:
            log.warning(
                "AGENT_SIGNAL_MAX_CONNECTIONS=%d is more than the file-handle limit (%d) leaves room for: "
                "serving at most %d connections (raise `ulimit -n` to serve more)",
                cap,
                soft,
                max(room, 1),
            )
            cap = max(room, 1)
        return cls(
            cap, settings.header_timeout_s, settings.body_timeout_s, settings.max_connections_per_client
        )


def door_protocol(limits: ConnectionLimits) -> type[H11Protocol]:
    """The protocol class to give ``uvicorn.Config(http=...)``: uvicorn's h11 protocol with ``limits``."""

    class LimitedH11(DoorProtocol):
        connection_limits = limits
        open_by_client: ClassVar[dict[str, int]] = {}  # this server's (each class is one server's)

    return LimitedH11


class DoorProtocol(H11Protocol):
    """uvicorn's h11 protocol with a connection cap and head and body deadlines (see the module docstring)."""

    connection_limits: ClassVar[ConnectionLimits]
    open_by_client: ClassVar[
        dict[str, int]
    ]  # open connections per client address (only those under the share)
    _deadline: asyncio.TimerHandle | None = None
    _phase: Phase | None = None
    _client: str | None = None  # the address this connection counts for

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        over_cap = len(self.connections) >= self.connection_limits.max_connections
        super().connection_made(transport)
        if over_cap:
            message = "this server holds as many connections as it may; retry in a second"
            _answer(transport, 503, "Service Unavailable", "too_many_connections", message, retry_after_s=1)
            return
        share = self.connection_limits.max_connections_per_client
        peer = transport.get_extra_info("peername")
        address = str(peer[0]) if share and isinstance(peer, tuple) and peer else None
        if address is not None:
            held = self.open_by_client.get(address, 0)
            if held >= share:
                message = (
                    f"this client address holds {held} connections, as many as one may "
                    "(AGENT_SIGNAL_MAX_CONNECTIONS_PER_CLIENT); reuse them, or retry in a second"
                )
                _answer(transport, 429, "Too Many Requests", "too_many_connections", message, retry_after_s=1)
                return
            self.open_by_client[address] = held + 1
            self._client = address
        self._follow()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow()

    def connection_lost(self, exc: Exception | None) -> None:
        self._set_phase(None)
        self._release_client()
        super().connection_lost(exc)

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        self._set_phase(None)  # the connection is the WebSocket protocol's from here on
        self._release_client()  # and its loss is that protocol's: counted no more (a review: the count leaked)
        super().handle_websocket_upgrade(event)

    def _release_client(self) -> None:
        """This connection no longer counts toward its address's share (once, whichever way it ends here)."""
        if self._client is None:
            return
        left = self.open_by_client.get(self._client, 1) - 1
        if left > 0:
            self.open_by_client[self._client] = left
        else:
            self.open_by_client.pop(self._client, None)
        self._client = None

    def _follow(self) -> None:
        """Arm the deadline of what the client owes now: a head (h11 IDLE), a body (SEND_BODY), or nothing."""
        if self.transport.is_closing():
            self._set_phase(None)
            return
        state = self.conn.their_state
        self._set_phase("head" if state is h11.IDLE else "body" if state is h11.SEND_BODY else None)

    def _set_phase(self, phase: Phase | None) -> None:
        if phase == self._phase:
            return  # the deadline is absolute: more bytes of the same head or body do not extend it
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._phase = phase
        if phase is not None:
            limits = self.connection_limits
            timeout_s = limits.header_timeout_s if phase == "head" else limits.body_timeout_s
            self._deadline = self.loop.call_later(timeout_s, self._expired, phase)

    def _expired(self, phase: Phase) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if phase == "head" and not self.conn.trailing_data[0]:
            self.transport.close()  # not a byte of a request: close as an idle kept-alive connection is closed
            return
        if phase == "head":
            timeout_s = self.connection_limits.header_timeout_s
            message = (
                f"the request's head did not arrive within {timeout_s:g} s (AGENT_SIGNAL_HEADER_TIMEOUT_S)"
            )
            _answer(self.transport, 408, "Request Timeout", "request_timeout", message)
            return
        self.transport.close()  # mid-body: the route reading it sees the client leave


def _answer(
    transport: asyncio.Transport,
    status: int,
    reason: str,
    code: str,
    message: str,
    *,
    retry_after_s: int | None = None,
) -> None:
    """Write one error answer (the API's error body) straight to the socket and close it: no request was read
    that h11 could answer."""
    body = json.dumps({"error": {"code": code, "message": message, "field": None}}).encode()
    head = [
        f"HTTP/1.1 {status} {reason}",
        "content-type: application/json",
        f"content-length: {len(body)}",
        "connection: close",
    ]
    if retry_after_s is not None:
        head.append(f"retry-after: {retry_after_s}")
    transport.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
    transport.close()
