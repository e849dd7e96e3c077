"""A web process's connections: its cap, and one client address's share of it (producers/http/connections.py). The
app is served by uvicorn with the door's limits (``serve_web``) and spoken to in raw HTTP/1.1 over sockets."""

from __future__ import annotations

import socket

import pytest

from tests.conftest import SettingsFactory, wait_for
from tests.security.door.test_trust_door import WebFactory, _connect, _port, _read_all, _status

pytestmark = pytest.mark.integration


def test_connections_over_the_cap_are_refused_and_the_process_keeps_answering(
    make_settings: SettingsFactory, serve_web: WebFactory
) -> None:
    """With the cap held by idle connections, the next one is answered 503 too_many_connections and closed at
    once (no file handle kept for it); once they go, /healthz answers again."""
    _, url = serve_web(make_settings(max_connections=20, header_timeout_s=60))
    port = _port(url)
    idle, answer = _one_past(port, 20)
    try:
        assert _status(answer) == 503 and b"too_many_connections" in answer, answer
        assert b"retry-after: 1" in answer.lower()
    finally:
        for sock in idle:
            sock.close()

    wait_for(
        lambda: _healthy(_connect(port)), timeout_s=30, what="/healthz after the idle connections closed"
    )


def _one_past(port: int, held: int) -> tuple[list[socket.socket], bytes]:
    """``held`` idle connections from 127.0.0.1 (left open for the caller to close), and the answer to one more."""
    idle = [_connect(port) for _ in range(held)]
    with _connect(port) as sock:
        return idle, _read_all(sock)


def _healthy(sock: socket.socket) -> bool:
    """``GET /healthz`` on a fresh connection (closed after): True when it answers 200."""
    with sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        return _status(_read_all(sock)) == 200


def test_one_client_address_holds_at_most_its_share_of_the_connections(
    make_settings: SettingsFactory, serve_web: WebFactory
) -> None:
    """A hostile-caller walk: one address holding every idle connection had 70% of another tenant's new ones
    refused. With a share of 5 the sixth from 127.0.0.1 is 429 too_many_connections and closed, while another
    address (127.0.0.2) still gets in and is answered; when one of the five closes, 127.0.0.1 gets in again."""
    _, url = serve_web(make_settings(max_connections=20, max_connections_per_client=5, header_timeout_s=60))
    port = _port(url)
    idle, answer = _one_past(port, 5)
    try:
        assert _status(answer) == 429 and b"too_many_connections" in answer, answer
        assert b"AGENT_SIGNAL_MAX_CONNECTIONS_PER_CLIENT" in answer and b"retry-after: 1" in answer.lower()
        assert _healthy(
            socket.create_connection(("127.0.0.1", port), timeout=30, source_address=("127.0.0.2", 0))
        )
        idle.pop().close()
        wait_for(
            lambda: _healthy(_connect(port)),
            timeout_s=30,
            what="127.0.0.1 let in once one of its five closed",
        )
    finally:
        for sock in idle:
            sock.close()
