"""One caller cannot make a web process hold (and parse) more request bodies than its memory takes.

Before: the caps counted requests, not bytes, and only while bodies arrived; at the defaults (8 MiB bodies) one
credential's concurrent posts made a process parse gigabytes (a parse takes up to ~32x a body's bytes). Now the
bytes of bodies a process holds, from the first byte until the request is answered, are counted in all, per
credential and per tenant (producers/http/door.py ``BodyBytes``): past the credential's half of
``AGENT_SIGNAL_MAX_BODY_BYTES_IN_FLIGHT`` a request is answered ``429 rate_limited``, past the whole ``503 busy``,
both with ``Retry-After``. A real web process, raw HTTP/1.1 over sockets.
"""

from __future__ import annotations

import json
import select
import socket
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from producers.http.door import BodyBytes
from producers.http.settings import DoorSettings
from tests.conftest import Proc, SettingsFactory, wait_for
from worker.settings import Settings

BOOT = "bootstrap-key-for-body-bytes-0123456789"
WebFactory = Callable[[Settings], tuple[Proc, str]]
EVENT = json.dumps(
    {
        "sourceType": "agent.user.message",
        "sourceId": "msg_bytes_1",
        "payload": {"topicId": "t", "message": "hi"},
    }
)


def test_the_budget_counts_bytes_in_all_and_per_credential_and_forgets_callers_that_hold_nothing() -> None:
    budget = BodyBytes(budget=1000)
    assert budget.take("a", 400) is None and budget.take("a", 100) is None
    refusal = budget.take("a", 1)  # the credential's half is 500
    assert refusal is not None and (refusal.status, refusal.code) == (429, "rate_limited")
    assert "AGENT_SIGNAL_MAX_BODY_BYTES_IN_FLIGHT" in refusal.message and refusal.retry_after_s == 1
    assert budget.take("b", 450) is None and budget.take(None, 40) is None  # None: a caller not known yet
    refusal = budget.take("c", 20)  # 990 held: the process's whole
    assert refusal is not None and (refusal.status, refusal.code) == (503, "busy")
    assert budget.held() == 990 and budget.held("a") == 500 and budget.held("c") == 0
    assert budget.check("c", 10) is None and budget.held() == 990  # check counts nothing
    for credential, size in (("a", 500), ("b", 450), (None, 40)):
        budget.give_back(credential, size)
    assert budget.held() == 0 and not budget._credentials
    unbounded = BodyBytes(budget=0)  # 0: none
    assert unbounded.take("a", 10**12) is None and unbounded.held() == 0


def test_a_budget_under_twice_the_largest_body_is_refused_at_start() -> None:
    with pytest.raises(ValueError, match="AGENT_SIGNAL_MAX_BODY_BYTES_IN_FLIGHT"):
        DoorSettings(max_request_bytes=1000, max_body_bytes_in_flight=1999)
    assert DoorSettings(max_request_bytes=1000, max_body_bytes_in_flight=0).body_bytes_in_flight == 0
    # unset: 32 MiB, or twice a larger body limit (raising the body limit alone never fails the start)
    assert DoorSettings(max_request_bytes=1000).body_bytes_in_flight == 32 * 1024 * 1024
    assert DoorSettings(max_request_bytes=30 * 1024 * 1024).body_bytes_in_flight == 60 * 1024 * 1024


def post(
    url: str, bearer: str, body: bytes, path: str = "/v1/events"
) -> tuple[int, dict[str, Any], str | None]:
    """POST ``body`` with ``bearer``: (status, JSON answer, Retry-After)."""
    request = urllib.request.Request(
        url + path,
        method="POST",
        data=body,
        headers={"Authorization": f"Bearer {bearer}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read() or b"{}"), None
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}"), err.headers.get("Retry-After")


def _key(url: str, tenant: str) -> str:
    request = urllib.request.Request(
        url + "/v1/keys",
        method="POST",
        data=json.dumps({"tenant": tenant, "role": "ingest"}).encode(),
        headers={"Authorization": f"Bearer {BOOT}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return str(json.loads(answer.read())["key"])


def _half_sent_post(url: str, bearer: str, declared: int | None, sent: int) -> socket.socket:
    """A POST /v1/events of which only ``sent`` bytes are sent: declaring ``declared`` bytes, or chunked (None)."""
    sock = socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])))
    sock.settimeout(30)
    length = "Transfer-Encoding: chunked" if declared is None else f"Content-Length: {declared}"
    head = (
        f"POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {bearer}\r\n"
        f"Content-Type: application/json\r\n{length}\r\n\r\n"
    )
    body = b" " * sent if declared is not None else f"{sent:x}\r\n".encode() + b" " * sent + b"\r\n"
    sock.sendall(head.encode() + body)
    return sock


def _probe(url: str, bearer: str, size: int) -> tuple[int, str, str | None]:
    """A body of ``size`` bytes that is no JSON: 422 when it is read (nothing is stored), else the refusal."""
    status, body, retry_after = post(url, bearer, b"[" * size)
    return status, str(body.get("error", {}).get("code")), retry_after


class Held:
    """A request kept half-sent. A probe that reaches the server before the held request's bytes are counted is
    counted first and the held one is refused (answered and closed): :meth:`ensure` sends it again, so a test
    waits for the state it needs with no guess of how long the server takes."""

    def __init__(self, url: str, bearer: str, declared: int | None, sent: int) -> None:
        self.args = (url, bearer, declared, sent)
        self.sock = _half_sent_post(*self.args)

    def ensure(self) -> bool:
        """True when it still waits; else (it was answered: refused, or its connection failed) sent again."""
        readable, _, _ = select.select([self.sock], [], [], 0)
        if readable:
            self.sock.close()
            self.sock = _half_sent_post(*self.args)
        return not readable

    def close(self) -> None:
        self.sock.close()


@pytest.mark.integration
def test_held_body_bytes_refuse_a_credential_past_its_half_and_the_process_past_its_budget(
    make_settings: SettingsFactory, start_web: WebFactory
) -> None:
    settings = make_settings(
        bootstrap_key=BOOT, max_request_bytes=100_000, max_body_bytes_in_flight=200_000, body_timeout_s=120
    )
    _, url = start_web(settings)
    key_a, key_b, key_c = _key(url, "default"), _key(url, "t-bytes-b"), _key(url, "t-bytes")
    held = [Held(url, key_a, declared=None, sent=60_000)]
    try:
        # A holds 60,000 bytes of a chunked body (counted as they arrive): 50,000 more are refused
        wait_for(
            lambda: held[0].ensure() and _probe(url, key_a, 50_000) == (429, "rate_limited", "1"),
            timeout_s=30,
            what="429 for a credential past half the budget",
        )
        held.append(Held(url, key_b, declared=90_000, sent=10))
        # B's declared 90,000 are counted whole at its first read: 150,000 held in all, so C (another tenant)
        # may not add 60,000, but a small request goes through
        wait_for(
            lambda: all([h.ensure() for h in held]) and _probe(url, key_c, 60_000) == (503, "busy", "1"),
            timeout_s=30,
            what="503 for the process past its budget",
        )
        assert post(url, key_c, EVENT.encode())[0] == 202
        assert _probe(url, key_a, 30_000)[0] == 422  # A's own half still has room for 30,000
    finally:
        for request in held:
            request.close()
    # the held requests ended: their bytes are given back
    wait_for(
        lambda: _probe(url, key_c, 60_000)[0] == 422 and _probe(url, key_a, 90_000)[0] == 422,
        timeout_s=30,
        what="the bytes given back once the held requests' connections closed",
    )


@pytest.mark.integration
def test_a_body_on_a_get_is_refused_so_no_stream_holds_its_bytes(
    make_settings: SettingsFactory, start_web: WebFactory
) -> None:
    """A review: a receipts stream sent with a body had its declared length counted (the stream's disconnect
    listener reads the body) for as long as the stream stayed open; two credentials' streams made every write of
    the process a 503. A GET, HEAD or OPTIONS with a body is refused before anything is read or counted."""
    settings = make_settings(bootstrap_key=BOOT, max_request_bytes=100_000, max_body_bytes_in_flight=200_000)
    _, url = start_web(settings)
    key = _key(url, "default")
    port = int(url.rsplit(":", 1)[1])
    for length in ("Content-Length: 90000", "Transfer-Encoding: chunked"):
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.settimeout(30)
            sock.sendall(
                f"GET /v1/receipts/stream?userId=u1 HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
                f"{length}\r\n\r\n".encode()
            )
            answer = b""
            while b"takes no body" not in answer and (chunk := sock.recv(65536)):
                answer += chunk  # the head and the body may come apart
        assert answer.startswith(b"HTTP/1.1 413 ") and b"takes no body" in answer, answer
    assert _probe(url, key, 90_000)[0] == 422  # nothing was counted: the whole half is there
