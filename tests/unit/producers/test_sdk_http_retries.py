"""HttpProducer's retries and deadline (producers/sdk/producer.py, worker/outbox/deadline.py): a request without
an answer (refused, dropped, timed out) and a 502, 503 or 504 are sent again, the same body each time (the door
dedupes it), then raised as StoreUnavailable; Retry-After is read as seconds or an HTTP date, and a missing or 0
one waits an exponential backoff; one deadline (``timeout_s``) bounds the whole call, so a door that trickles
its answer cannot hold it (nor a SessionClient call). Doors are httpx MockTransports, or a stub HTTP server in a
thread for what only a socket shows (a refused connection, a trickle)."""

from __future__ import annotations

import email.utils
import socket
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpcore
import httpx
import pytest

from producers import HttpProducer, OverLimit, SessionClient, StoreUnavailable
from producers.sdk.http_door import NoAnswer, retry_after_s
from worker.outbox.deadline import Deadline

EVENT = {"sourceType": "test.timeline", "sourceId": "s1", "scopeKey": "topic:a", "payload": {}}
ACCEPTED = {"results": [{"eventId": "evt_1", "sourceId": "s1", "status": "accepted"}]}
Answer = httpx.Response | Exception


def _error(code: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": "no", "field": None}}


class Door:
    """A scripted door: answers (or raises) ``answers`` in order, the last one again; records requests and waits."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers)
        self.sent: list[bytes] = []
        self.waits: list[float] = []

    def answer(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request.content)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def producer(self, **options: Any) -> HttpProducer:
        producer = HttpProducer("http://door", **options)
        producer.client = httpx.Client(base_url="http://door", transport=httpx.MockTransport(self.answer))
        producer.sleep = self.waits.append
        return producer


def _backoff_shaped(waits: list[float]) -> bool:
    """Each wait at least 0.5 s doubled per attempt, never more than 8 s plus its 0.5 s of jitter."""
    return all(0.5 * 2**i <= wait <= min(0.5 * 2**i, 8.0) + 0.5 for i, wait in enumerate(waits))


class TestNoAnswer:
    def test_a_refused_connection_is_retried_then_store_unavailable(self) -> None:
        """Nothing listens: each retry waits a backoff, then NoAnswer (a StoreUnavailable, as the docs promise
        when the store cannot be reached), saying nothing was stored; was a bare httpx.ConnectError."""
        with socket.socket() as probe:  # a port nothing listens on
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        waits: list[float] = []
        with HttpProducer(f"http://127.0.0.1:{port}", max_retries=2) as producer:
            producer.sleep = waits.append
            with pytest.raises(StoreUnavailable) as raised:
                producer.enqueue(EVENT)
        assert isinstance(raised.value, NoAnswer) and not raised.value.maybe_stored
        assert str(raised.value).startswith(f"cannot reach http://127.0.0.1:{port} (")
        assert isinstance(raised.value.__cause__, httpx.ConnectError)
        assert len(waits) == 2 and _backoff_shaped(waits)

    def test_a_read_timeout_is_sent_again_with_the_same_body(self) -> None:
        """A timeout before the call's deadline (a given client's own) is retried; the door dedupes the body."""
        door = Door(httpx.ReadTimeout("slow"), httpx.Response(202, json=ACCEPTED))
        assert door.producer().enqueue(EVENT).status == "accepted"
        assert len(door.sent) == 2 and len(set(door.sent)) == 1 and _backoff_shaped(door.waits)

    def test_a_connection_dropped_every_time_says_the_events_may_be_stored(self) -> None:
        """The request left each time: once the retries are spent the error says sending again is safe."""
        door = Door(httpx.RemoteProtocolError("Server disconnected without sending a response."))
        with pytest.raises(NoAnswer) as raised:
            door.producer(max_retries=1).enqueue_many([EVENT])
        assert raised.value.maybe_stored and not raised.value.timed_out and len(door.sent) == 2
        assert "may be stored" in str(raised.value)


class TestErrorAnswers:
    @pytest.mark.parametrize("status", [502, 503, 504])
    def test_a_gateway_or_store_failure_is_retried(self, status: int) -> None:
        """A proxy's 502/504 (was an httpx.HTTPStatusError at once) and a 503 are sent again."""
        door = Door(httpx.Response(status, text="upstream"), httpx.Response(202, json=ACCEPTED))
        assert door.producer().enqueue(EVENT).status == "accepted"
        assert len(door.sent) == 2 and _backoff_shaped(door.waits)

    def test_a_gateway_failure_spent_is_store_unavailable(self) -> None:
        """A proxy that keeps answering 502 ends as StoreUnavailable, not httpx's error quoting the URL."""
        door = Door(httpx.Response(502, text="<html>bad gateway</html>"))
        with pytest.raises(StoreUnavailable, match="a gateway answered 502"):
            door.producer(max_retries=1).enqueue(EVENT)
        assert len(door.sent) == 2

    def test_a_503_with_retry_after_0_backs_off(self) -> None:
        """Retry-After 0 was honoured as no wait at all: three requests back to back."""
        busy = httpx.Response(503, json=_error("store_unavailable"), headers={"Retry-After": "0"})
        door = Door(busy, busy, busy, httpx.Response(202, json=ACCEPTED))
        assert door.producer().enqueue(EVENT).status == "accepted"
        assert len(door.waits) == 3 and _backoff_shaped(door.waits)

    def test_a_429_with_an_http_date_is_waited_for(self) -> None:
        """``Retry-After: <HTTP date>`` was read as 0 (raised at once): it is the seconds until that date."""
        at = email.utils.format_datetime(datetime.now(UTC) + timedelta(seconds=5), usegmt=True)
        limited = httpx.Response(429, json=_error("rate_limited"), headers={"Retry-After": at})
        door = Door(limited, httpx.Response(202, json=ACCEPTED))
        assert door.producer().enqueue(EVENT).status == "accepted"
        assert len(door.waits) == 1 and 1 <= door.waits[0] <= 5

    def test_a_wait_that_would_pass_the_deadline_is_not_taken(self) -> None:
        """With 2 s left a Retry-After of 5 s is raised with its retry_after_s, not slept through."""
        door = Door(httpx.Response(503, json=_error("store_unavailable"), headers={"Retry-After": "5"}))
        with pytest.raises(StoreUnavailable) as raised:
            door.producer(timeout_s=2).enqueue(EVENT)
        assert raised.value.retry_after_s == 5 and door.waits == [] and len(door.sent) == 1

    def test_a_429_without_retry_after_is_not_retried(self) -> None:
        """A quota: waiting does not free it (unchanged)."""
        door = Door(httpx.Response(429, json=_error("quota_exceeded")))
        with pytest.raises(OverLimit):
            door.producer().enqueue(EVENT)
        assert len(door.sent) == 1 and door.waits == []


NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("7", 7),
        ("1.5", 2),
        (email.utils.format_datetime(NOW + timedelta(seconds=10), usegmt=True), 10),
        ("Friday, 02-Jan-26 03:04:15 GMT", 10),  # the obsolete RFC 850 form a recipient must read
        (email.utils.format_datetime(NOW - timedelta(seconds=10), usegmt=True), 0),
        ("soon", None),
        ("-1", None),
        ("", None),
    ],
)
def test_retry_after_reads_seconds_and_http_dates(header: str, seconds: int | None) -> None:
    """Seconds (rounded up) or an HTTP date, relative to now; None for what is neither."""
    response = httpx.Response(503, headers={"Retry-After": header} if header else {})
    assert retry_after_s(response, now=NOW) == seconds


def test_an_attempt_timeout_is_capped_by_the_time_left() -> None:
    """Each phase of a client's timeout, and none (no limit), becomes at most the time left."""
    capped = Deadline(2.0).attempt_timeout(httpx.Timeout(30.0, connect=1.0, pool=None))
    assert capped.connect == 1.0
    assert all(value is not None and 0 < value <= 2.0 for value in (capped.read, capped.write, capped.pool))


class _Trickle(ThreadingHTTPServer):
    """Answers every request one byte at a time, for as long as the client listens (or until ``stop``)."""

    daemon_threads = True

    def __init__(self, answer: bytes) -> None:
        super().__init__(("127.0.0.1", 0), _TrickleHandler)
        self.answer = answer
        self.stop = threading.Event()


class _TrickleHandler(BaseHTTPRequestHandler):
    server: _Trickle

    def _trickle(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        for byte in self.server.answer:
            if self.server.stop.wait(0.1):  # the pace of the trickle; the test's end stops it
                return
            try:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
            except OSError:  # the client gave up
                return

    do_GET = do_POST = do_PUT = _trickle

    def log_message(self, *args: Any) -> None:
        pass


STATUS_LINE_TRICKLE = b"HTTP/1.1 202 Accepted\r\nX-Slow: " + b"a" * 10_000
BODY_TRICKLE = b"HTTP/1.1 202 Accepted\r\nContent-Length: 10000\r\n\r\n" + b" " * 10_000


@pytest.fixture
def trickle() -> Iterator[Callable[[bytes], str]]:
    servers: list[_Trickle] = []

    def start(answer: bytes) -> str:
        server = _Trickle(answer)
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.stop.set()
        server.shutdown()
        server.server_close()


@pytest.mark.timeout(60)  # before the fix the call never ended: this fails it in a minute
@pytest.mark.parametrize("answer", [STATUS_LINE_TRICKLE, BODY_TRICKLE], ids=["headers", "body"])
@pytest.mark.parametrize("proxied", [False, True], ids=["direct", "proxy-bypassed"])
def test_a_trickling_door_is_cut_off_at_the_deadline(
    trickle: Callable[[bytes], str], answer: bytes, proxied: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ten bytes a second never trip httpx's read timeout: the call's deadline ends it, as NoAnswer saying it
    timed out (the request was on its way: its events may be stored). Also with a proxy variable set and the
    door's host in NO_PROXY (a review: any proxy variable dropped the deadline)."""
    for name in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    if proxied:
        monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there: a use would fail
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    with HttpProducer(trickle(answer), timeout_s=1) as producer:
        with pytest.raises(NoAnswer) as raised:
            producer.enqueue(EVENT)
    assert raised.value.timed_out and raised.value.maybe_stored
    assert str(raised.value).startswith("no answer from http://127.0.0.1:") and " within 1 s" in str(
        raised.value
    )


@pytest.mark.timeout(60)
def test_a_session_call_has_a_deadline_too(trickle: Callable[[bytes], str]) -> None:
    """SessionClient's call against the same door ends at its ``timeout_s`` with httpx's timeout error."""
    with SessionClient(trickle(BODY_TRICKLE), timeout_s=1) as client:
        with pytest.raises(httpx.TimeoutException):
            client.context("s1")


class _Proxy(BaseHTTPRequestHandler):
    """A forward proxy that answers every request itself and remembers its request line."""

    seen: list[str] = []

    def do_POST(self) -> None:
        _Proxy.seen.append(self.requestline)
        _Proxy.seen.append(self.headers.get("proxy-authorization") or "")
        length = int(self.headers.get("content-length", "0"))
        self.rfile.read(length)
        body = b'{"results":[{"eventId":"evt_1","sourceId":"via-proxy","status":"accepted"}]}'
        self.send_response(202)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize(
    ("form", "auth"),
    [("http://{at}", ""), ("{at}", ""), ("http://user:s3cret@{at}", "Basic dXNlcjpzM2NyZXQ=")],
    ids=["url", "no-scheme", "credentials"],
)
def test_the_environments_proxy_is_used(monkeypatch: pytest.MonkeyPatch, form: str, auth: str) -> None:
    """Reviews: the SDK's own transport switched httpx's environment proxies off, so callers behind a corporate
    proxy connected straight to the door; then its proxy dropped the proxy's credentials, and a variable without
    a scheme (``proxy:3128``) broke the client. With HTTP_PROXY set the request goes through the proxy, as
    httpx's own transport sends it."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Proxy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Proxy.seen = []
    try:
        for name in (
            "HTTPS_PROXY",
            "ALL_PROXY",
            "NO_PROXY",
            "https_proxy",
            "all_proxy",
            "no_proxy",
            "http_proxy",
        ):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTP_PROXY", form.format(at=f"127.0.0.1:{server.server_address[1]}"))
        with HttpProducer("http://door.invalid:8000", max_retries=0) as producer:
            result = producer.enqueue({"sourceType": "test.timeline", "sourceId": "via-proxy", "payload": {}})
        assert result.status == "accepted"
        assert _Proxy.seen == ["POST http://door.invalid:8000/v1/events HTTP/1.1", auth]
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("no_proxy", ["::1", "localhost,127.0.0.1,::1", "[::1]", "[::1]:8000"])
def test_no_proxy_names_an_ipv6_door_as_httpx_reads_it(
    monkeypatch: pytest.MonkeyPatch, no_proxy: str
) -> None:
    """A review: with the host passed bracketed, ``NO_PROXY=::1`` no longer matched an IPv6 door, which httpx
    bypasses; such a door goes straight, with the deadline's transport."""
    from worker.outbox.deadline import DeadlineTransport, deadline_transport

    for name in ("HTTPS_PROXY", "ALL_PROXY", "https_proxy", "all_proxy", "http_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    monkeypatch.setenv("NO_PROXY", no_proxy)
    transport = deadline_transport("http://[::1]:8000")
    assert isinstance(transport, DeadlineTransport) and isinstance(transport._pool, httpcore.ConnectionPool)
