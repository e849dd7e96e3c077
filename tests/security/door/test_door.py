"""The door holds (issue 12): one regression test per finding, named after it.

Apps are built by ``create_web_app`` from the ``make_settings`` fixture (a real Redis under the test's own key
prefix); the streamed-body test runs a real web process (``start_web``) and talks raw HTTP/1.1 to it, so it
can see the answer arrive while its body is still being sent.
"""

from __future__ import annotations

import json
import select
import socket
from collections.abc import Callable
from html.parser import HTMLParser
from typing import Any

import anyio
import pytest
from redis import Redis
from starlette.types import Message, Scope

from producers.http.app import create_web_app
from producers.http.door import API_CSP, DOCS_CSP
from producers.http.routes.routing import RECORD_ERROR_HEADER
from producers.http.strict_json import MAX_JSON_DEPTH, decode_json
from tests.conftest import ROOT, Proc, SettingsFactory
from tests.security.conftest import ClientFactory
from worker.core.clock import now_ms
from worker.core.ids import id_problem
from worker.keys.layout import BucketKeys
from worker.settings import Settings

pytestmark = pytest.mark.integration

GOOD: dict[str, Any] = {
    "sourceType": "agent.user.message",
    "sourceId": "msg_1",
    "payload": {"topicId": "tpc_1", "message": "hi"},
}
CHAT: dict[str, Any] = {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}


def _stored(redis_client: Redis, keys: BucketKeys) -> list[str]:
    """Keys under the test's prefix that hold data (the broker's and the counters' excluded)."""
    return [
        k
        for k in redis_client.scan_iter(match=f"{keys.prefix}*")
        if ":broker:" not in k and not k.endswith("-secret") and not k.endswith(("stats", "metrics"))
    ]


def _error(response: Any) -> dict[str, Any]:
    error: dict[str, Any] = response.json()["error"]
    return error


class TestBodyLimit:
    def test_body_over_limit_outside_events_is_413_before_reading(
        self, make_settings: SettingsFactory
    ) -> None:
        """A declared Content-Length over the limit on a non-events route is answered 413 without one
        receive() of the body; a real over-limit body on other routes is 413 too."""
        app = create_web_app(make_settings(max_request_bytes=1024))
        reads: list[Any] = []
        sent: list[Message] = []

        async def receive() -> Message:
            reads.append(1)
            return {"type": "http.request", "body": b"{}", "more_body": True}

        async def send(message: Message) -> None:
            sent.append(message)

        scope: Scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/v1/sessions/s1/context/messages",
            "raw_path": b"/v1/sessions/s1/context/messages",
            "query_string": b"",
            "root_path": "",
            "headers": [
                (b"host", b"localhost"),
                (b"content-type", b"application/json"),
                (b"content-length", b"50000000"),
            ],
            "client": ("127.0.0.1", 5000),
            "server": ("127.0.0.1", 8000),
        }
        anyio.run(app, scope, receive, send)
        assert sent[0]["status"] == 413 and reads == []
        body = json.loads(b"".join(m.get("body", b"") for m in sent[1:]))
        assert body["error"] == {
            "code": "request_too_large",
            "message": "request body is 50000000 bytes; the limit is 1024",
            "field": None,
        }

    def test_body_over_limit_on_session_and_route_writes_is_413(
        self, app_client: ClientFactory, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """Session writes and routing share the one limit: 413 request_too_large, nothing stored."""
        client = app_client(
            max_request_bytes=1024, router_config=str(ROOT / "bench" / "data" / "router.yaml")
        )
        big = {"messages": [{"role": "user", "content": "x" * 4000}]}
        for method, path, body in [
            ("POST", "/v1/sessions/s1/context/messages", big),
            ("PUT", "/v1/sessions/s1/artifacts/notes", {"content": "x" * 4000}),
            ("POST", "/v1/route", {"request": {**CHAT, "messages": big["messages"]}}),
        ]:
            response = client.request(method, path, json=body)
            assert response.status_code == 413, path
            assert _error(response)["code"] == "request_too_large"
        assert _stored(redis_client, keys) == []

    def test_events_body_streamed_over_limit_is_413(
        self, make_settings: SettingsFactory, start_web: Callable[[Settings], tuple[Proc, str]]
    ) -> None:
        """A chunked body (no Content-Length) far over the limit is answered 413 while it is still being sent:
        the answer arrives before the body's end, which a server that read it all first could not do."""
        limit = 64 * 1024
        _, url = start_web(make_settings(max_request_bytes=limit))
        port = int(url.rsplit(":", 1)[1])
        total = 1024 * limit  # 64 MB offered
        chunk = b"[" + b"0," * 8191 + b"0]"  # 16 KB of JSON-ish bytes per chunk
        status, body, sent = _post_chunked(port, "/v1/events", chunk, total)
        assert status == 413
        assert json.loads(body)["error"]["code"] == "request_too_large"
        assert sent < total // 4, f"the server answered only after {sent} of {total} bytes"


def _post_chunked(port: int, path: str, chunk: bytes, total: int) -> tuple[int, bytes, int]:
    """POST ``chunk`` repeatedly (chunked encoding) until the server answers or ``total`` bytes are sent;
    returns (status, body, bytes sent before the answer was readable)."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        sock.sendall((head + "Transfer-Encoding: chunked\r\n\r\n").encode())
        sent = 0
        while sent < total and not select.select([sock], [], [], 0)[0]:
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            sent += len(chunk)
        sock.settimeout(30)
        raw = b""
        while b"\r\n\r\n" not in raw:
            raw += sock.recv(65536)
        head_raw, _, rest = raw.partition(b"\r\n\r\n")
        length = int(
            next(
                line.split(b":")[1]
                for line in head_raw.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )
        )
        while len(rest) < length:
            rest += sock.recv(65536)
        return int(head_raw.split(b" ")[1]), rest[:length], sent


class TestContentTypeAndOrigin:
    def test_cross_site_text_plain_post_is_refused(
        self, app_client: ClientFactory, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """A text/plain POST from another site (what a web page can send without a preflight) is 403
        bad_origin; without the Origin it is still 415 for its content type; nothing is stored."""
        client = app_client()
        text = json.dumps(GOOD)
        for path in ("/v1/events", "/v1/dlq/redrive", "/v1/sessions/s1/context/messages"):
            cross = client.post(
                path, content=text, headers={"content-type": "text/plain", "origin": "https://evil.example"}
            )
            assert cross.status_code == 403, path
            assert _error(cross) == {
                "code": "bad_origin",
                "message": "origin 'https://evil.example' may not call this API "
                "(AGENT_SIGNAL_ALLOWED_ORIGINS lists the allowed ones)",
                "field": "origin",
            }
            plain = client.post(path, content=text, headers={"content-type": "text/plain"})
            assert plain.status_code == 415 and _error(plain)["code"] == "unsupported_media_type"
            assert _error(plain)["field"] == "content-type"
        assert _stored(redis_client, keys) == []
        same_site = client.post("/v1/events", json=GOOD, headers={"origin": "http://testserver"})
        assert same_site.status_code == 202
        charset = client.post(
            "/v1/events",
            content=json.dumps({**GOOD, "sourceId": "m2"}),
            headers={"content-type": "application/json; charset=utf-8"},
        )
        assert charset.status_code == 202

    def test_listed_origin_is_allowed(self, app_client: ClientFactory) -> None:
        """AGENT_SIGNAL_ALLOWED_ORIGINS admits another origin and an unlisted one stays refused; the request's
        own host counts on either scheme (a TLS-terminating proxy), another port of it does not."""
        client = app_client(allowed_origins=["https://app.example"])
        for i, (origin, status) in enumerate(
            [
                ("https://app.example", 202),
                ("https://app.example.evil", 403),
                ("https://testserver", 202),
                ("http://testserver:8080", 403),
            ]
        ):
            event = {**GOOD, "sourceId": f"o{i}"}
            assert client.post("/v1/events", json=event, headers={"origin": origin}).status_code == status, (
                origin
            )

    def test_foreign_host_header_is_refused(self, app_client: ClientFactory) -> None:
        """A Host that is not ours (DNS rebinding) is 400 bad_host on reads and writes alike; loopback names,
        with a port, and AGENT_SIGNAL_ALLOWED_HOSTS are served."""
        client = app_client(allowed_hosts=["api.example", "testserver"])
        for method, path in (("GET", "/v1/conversations"), ("POST", "/v1/events")):
            response = client.request(method, path, json=GOOD, headers={"host": "rebind.evil.example"})
            assert response.status_code == 400
            assert _error(response)["code"] == "bad_host" and _error(response)["field"] == "host"
        for host in ("localhost:8000", "127.0.0.1", "[::1]:8000", "api.example", "API.example:443"):
            assert client.get("/v1/conversations", headers={"host": host}).status_code == 200, host


class TestHeaders:
    def test_every_answer_carries_the_services_clock(self, app_client: ClientFactory) -> None:
        """x-server-time-ms: the service's clock (now_ms, Redis's) at the answer, which the console's ages start
        from; an error's answer too (the console's ages were the browser's clock, then the web host's Date)."""
        client = app_client()
        for path in ("/v1/conversations", "/v1/events/nope", "/ui/app.js"):
            before = now_ms()
            stamped = int(client.get(path).headers["x-server-time-ms"])
            assert before <= stamped <= now_ms(), path

    def test_ui_sends_csp_and_frame_headers(self, app_client: ClientFactory) -> None:
        """The UI, its files, API answers and errors carry CSP (frame-ancestors 'none'), X-Frame-Options,
        nosniff and no-referrer; the docs page has its own CSP; the UI has nothing inline for CSP to block."""
        client = app_client()
        for path in ("/", "/ui/app.js", "/ui/app.css", "/v1/conversations", "/v1/events/nope"):
            headers = client.get(path).headers
            assert headers["content-security-policy"] == API_CSP, path
            assert headers["x-frame-options"] == "DENY"
            assert headers["x-content-type-options"] == "nosniff"
            assert headers["referrer-policy"] == "no-referrer"
        assert "frame-ancestors 'none'" in API_CSP and "default-src 'self'" in API_CSP
        docs = client.get("/docs")
        if docs.status_code == 200:  # the docs may be protected by another setting; the policy is ours
            assert docs.headers["content-security-policy"] == DOCS_CSP
        assert "frame-ancestors 'none'" in DOCS_CSP and "https:" not in DOCS_CSP  # no CDN allowed
        inline = _InlineFinder()
        inline.feed((ROOT / "producers" / "ui" / "index.html").read_text())
        assert inline.found == []


class _InlineFinder(HTMLParser):
    """Collects what ``default-src 'self'`` would block: inline scripts, style blocks or attributes, handlers."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = {name for name, _ in attrs}
        if (tag == "script" and "src" not in names) or tag == "style" or "style" in names:
            self.found.append(tag)
        self.found += [f"{tag}[{name}]" for name in names if name.startswith("on")]


class TestJsonAndIds:
    def test_deeply_nested_json_is_422(
        self, app_client: ClientFactory, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """Nesting past the limit is 422 invalid_json (not a 500 RecursionError) on /v1/events and the other
        body routes; nesting within it is decoded."""
        client = app_client()
        deep = b"[" * 100_000 + b"]" * 100_000
        just_over = b'{"a":' * (MAX_JSON_DEPTH + 1) + b"1" + b"}" * (MAX_JSON_DEPTH + 1)
        for path in ("/v1/events", "/v1/sessions/s1/context/messages", "/v1/dlq/redrive"):
            for body in (deep, just_over):
                response = client.post(path, content=body, headers={"content-type": "application/json"})
                assert response.status_code == 422, path
                assert _error(response) == {
                    "code": "invalid_json",
                    "message": f"request body is nested deeper than {MAX_JSON_DEPTH} levels",
                    "field": None,
                }
        unbalanced = client.post(
            "/v1/events", content=b"[" * 100_000, headers={"content-type": "application/json"}
        )
        assert unbalanced.status_code == 422 and _error(unbalanced)["code"] == "invalid_json"
        assert _stored(redis_client, keys) == []
        at_limit = b'{"a":' * MAX_JSON_DEPTH + b'"[[[{{"' + b"}" * MAX_JSON_DEPTH
        assert decode_json(at_limit) is not None
        nested: Any = "x"
        for _ in range(40):
            nested = {"n": nested}
        ok = client.post("/v1/events", json={**GOOD, "payload": {**GOOD["payload"], "deep": nested}})
        assert ok.status_code == 202

    def test_user_id_with_unit_separator_is_422(
        self, app_client: ClientFactory, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """An id carrying \\x1f (our separator inside Redis members) is a 422 naming the field, in a batch,
        a single event and the payload; nothing is stored and /v1/conversations keeps working."""
        client = app_client()
        batch = client.post(
            "/v1/events", json={"events": [GOOD, {**GOOD, "sourceId": "m2", "userId": "u\x1f1"}]}
        )
        assert batch.status_code == 422
        assert _error(batch)["field"] == "events[1].userId"
        assert "'\\x1f'" in _error(batch)["message"]
        for event, field in [
            ({**GOOD, "agentId": "a 1"}, "agentId"),
            ({**GOOD, "workspaceId": 'w"1'}, "workspaceId"),
            ({**GOOD, "scopeKey": "s\n1"}, "scopeKey"),
            ({**GOOD, "sourceId": "x" * 257}, "sourceId"),
            ({**GOOD, "payload": {"topicId": "t\x1f1", "message": "hi"}}, "payload.topicId"),
            ({**GOOD, "payload": {"userId": "u\x1f1", "agentId": "a", "message": "hi"}}, "payload.userId"),
        ]:
            response = client.post("/v1/events", json=event)
            assert response.status_code == 422 and _error(response)["field"] == field, field
        assert _stored(redis_client, keys) == []
        assert client.get("/v1/conversations").status_code == 200

    def test_real_ids_pass_the_id_rule(self) -> None:
        """Every id in examples/events.jsonl (and common shapes: emails, base64, paths) passes the rule."""
        ids = ["user@example.com", "dGVzdA==", "org/team/agent-1", "tool#1", "a+b", "x" * 256]
        for line in (ROOT / "examples" / "events.jsonl").read_text().splitlines():
            event = json.loads(line)
            ids += [
                event[k] for k in ("sourceId", "scopeKey", "userId", "agentId", "workspaceId") if k in event
            ]
            ids += [v for k, v in event["payload"].items() if k.endswith("Id") and isinstance(v, str)]
        assert [(i, id_problem(i)) for i in ids if id_problem(i) is not None] == []


class TestRoute:
    def test_route_does_not_500_when_recorded_event_is_invalid(
        self, app_client: ClientFactory, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """A route whose chat.request record the store would refuse (payload over the event limit) is still
        answered, naming the record's failure in a header; a bad caller id is a 422 before routing."""
        # the record carries the answered RouteResult too (about 1.5 KB with this config): 4 KiB holds a short chat
        client = app_client(router_config=str(ROOT / "bench" / "data" / "router.yaml"), max_event_bytes=4096)
        long_chat = {**CHAT, "messages": [{"role": "user", "content": "y" * 5000}]}
        response = client.post("/v1/route", json={"request": long_chat, "requestId": "req-1"})
        assert response.status_code == 200
        assert "decision" in response.json() and "model" in response.json()
        assert response.headers[RECORD_ERROR_HEADER] == "payload_too_large"
        assert _stored(redis_client, keys) == []
        bad_id = client.post("/v1/route", json={"request": CHAT, "requestId": "has space"})
        assert bad_id.status_code == 422 and _error(bad_id)["field"] == "requestId"
        bad_user = client.post("/v1/route", json={"request": CHAT, "userId": "u\x1f1"})
        assert bad_user.status_code == 422 and _error(bad_user)["field"] == "userId"
        recorded = client.post("/v1/route", json={"request": CHAT, "requestId": "r" * 256})
        assert recorded.status_code == 200 and RECORD_ERROR_HEADER not in recorded.headers


class TestPageBounds:
    def test_a_conversations_limit_out_of_range_is_refused_naming_it(self, app_client: ClientFactory) -> None:
        """``GET /v1/conversations?limit=`` read 0 as 1 and 100,000 as 500, silently; now 1 to 500 or a 422."""
        client = app_client()
        for bad in ("0", "501", "-1", "many"):
            response = client.get("/v1/conversations", params={"limit": bad})
            assert response.status_code == 422, (bad, response.text)
            assert _error(response)["field"] == "limit"
        assert client.get("/v1/conversations", params={"limit": 500}).status_code == 200
