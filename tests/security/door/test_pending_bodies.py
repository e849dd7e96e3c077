"""One caller cannot hold the door's connections by sending request heads and no body.

Before: a caller with a valid key could send ``AGENT_SIGNAL_MAX_CONNECTIONS`` request heads and never their bodies;
each held a connection for ``AGENT_SIGNAL_BODY_TIMEOUT_S`` (about 33 such requests a second, well inside the
per-key rate, kept a process's 2,000 connections full). Now the bodies a process waits for are counted per
credential and per tenant (producers/http/door.py ``PendingBodies``), and a caller past either cap is answered
``429 rate_limited`` at once. A real web process, raw HTTP/1.1 over sockets.
"""

from __future__ import annotations

import json
import re
import select
import socket
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from producers.http.access.principal import Principal
from producers.http.door import PendingBodies
from tests.conftest import Proc, SettingsFactory, wait_for
from worker.settings import Settings

BOOT = "bootstrap-key-for-pending-bodies-0123456789"
WebFactory = Callable[[Settings], tuple[Proc, str]]
EVENT = json.dumps(
    {
        "sourceType": "agent.user.message",
        "sourceId": "msg_pending_1",
        "payload": {"topicId": "t", "message": "hi"},
    }
)


def test_the_caps_count_each_caller_and_forget_callers_that_hold_nothing() -> None:
    pending = PendingBodies(per_credential=2, per_tenant=3)
    a, b = Principal("t1", "ingest", "key-a"), Principal("t1", "ingest", "key-b")
    other = Principal("t2", "ingest", "key-c")
    assert pending.take(a) is None and pending.take(a) is None
    refusal = pending.take(a)
    assert refusal is not None and "AGENT_SIGNAL_MAX_PENDING_BODIES_PER_CREDENTIAL" in refusal
    assert pending.take(b) is None
    refusal = pending.take(b)
    assert refusal is not None and "AGENT_SIGNAL_TENANT_MAX_PENDING_BODIES" in refusal
    assert pending.take(other) is None  # another tenant's slots are its own
    assert pending.held(a) == (2, 3)
    for principal in (a, a, b, other):
        pending.give_back(principal)
    assert pending.held(a) == (0, 0) and not pending._credentials and not pending._tenants
    unbounded = PendingBodies(per_credential=10, per_tenant=0)  # 0: no tenant cap
    assert all(unbounded.take(Principal("t1", "user", f"issuer:{i}", str(i))) is None for i in range(50))


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _call(
    url: str, method: str, path: str, bearer: str, body: str | None = None
) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        url + path,
        method=method,
        data=body.encode() if body is not None else None,
        headers={"Authorization": f"Bearer {bearer}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read() or b"{}")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def _key(url: str, tenant: str) -> str:
    status, body = _call(url, "POST", "/v1/keys", BOOT, json.dumps({"tenant": tenant, "role": "ingest"}))
    assert status == 201, body
    return str(body["key"])


def _held_post(port: int, bearer: str) -> socket.socket:
    """A POST /v1/events whose head is sent and whose body never is."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.settimeout(30)
    head = (
        f"POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {bearer}\r\n"
        "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    )
    sock.sendall(head.encode())
    return sock


def _first_answer(socks: list[socket.socket]) -> bytes:
    """The first answer any of ``socks`` gets, read until it is whole (30 s at most: a hang fails); not until its
    connection closes, which uvicorn leaves open for its keep-alive (5 s) after a refusal."""
    readable, _, _ = select.select(socks, [], [], 30)
    assert readable, "no request was answered"
    data = b""
    while not _whole(data) and (chunk := readable[0].recv(65536)):
        data += chunk
    return data


def _whole(answer: bytes) -> bool:
    """Whether ``answer`` holds a head and all the body its Content-Length announces."""
    head, end, body = answer.partition(b"\r\n\r\n")
    length = re.search(rb"(?im)^content-length: *(\d+)", head)
    return bool(end) and length is not None and len(body) >= int(length.group(1))


@pytest.mark.integration
def test_a_caller_that_sends_heads_and_no_bodies_is_refused_past_its_caps(
    make_settings: SettingsFactory, start_web: WebFactory
) -> None:
    settings = make_settings(
        bootstrap_key=BOOT,
        max_pending_bodies_per_credential=3,
        tenant_max_pending_bodies=5,
        body_timeout_s=120,
    )
    _, url = start_web(settings)
    port = _port(url)
    key_a, key_b, other_tenant = _key(url, "default"), _key(url, "default"), _key(url, "t-pending")
    held_a = [_held_post(port, key_a) for _ in range(4)]
    held_b: list[socket.socket] = []
    try:
        # the credential's cap: of four heads, one is answered at once; three wait for their bodies
        answer = _first_answer(held_a)
        assert b" 429 " in answer.split(b"\r\n", 1)[0], answer[:300]
        assert (
            b"AGENT_SIGNAL_MAX_PENDING_BODIES_PER_CREDENTIAL" in answer
            and b"retry-after: 1" in answer.lower()
        )
        # another tenant's caller is not held up by them
        assert _call(url, "POST", "/v1/events", other_tenant, EVENT)[0] == 202
        # the tenant's cap: three of A's and two of B's are waited for; B's third is refused
        held_b = [_held_post(port, key_b) for _ in range(3)]
        answer = _first_answer(held_b)
        assert b" 429 " in answer.split(b"\r\n", 1)[0] and b"AGENT_SIGNAL_TENANT_MAX_PENDING_BODIES" in answer
    finally:
        for sock in held_a + held_b:
            sock.close()
    # the held connections gone, their slots are given back: B's requests go through again
    wait_for(
        lambda: _call(url, "POST", "/v1/events", key_b, EVENT)[0] == 202,
        timeout_s=30,
        what="a request once the held bodies' connections closed",
    )
