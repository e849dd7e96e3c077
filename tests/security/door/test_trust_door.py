"""A door in linear time that reads nothing before it knows you (issue 26: findings 1, 6, 10 and 11): one
regression test per finding, named after it.

Apps are built by ``create_web_app`` on a real Redis under the test's own key prefix; what depends on the
server (connection caps, header and body deadlines, what is read before authentication) serves it with uvicorn
and the door's limits (``serve_web``) and talks raw HTTP/1.1 to it over sockets.
"""

from __future__ import annotations

import json
import re
import secrets
import select
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from redis import Redis
from starlette.types import Message, Receive, Scope, Send

from producers.http.app import create_web_app
from producers.http.settings import door_settings
from producers.http.strict_json import MAX_JSON_DEPTH
from tests.conftest import ROOT, ServedWeb, SettingsFactory, settings_env, wait_for
from tests.security.conftest import ClientFactory
from tests.support.private_redis import private_redis
from tests.support.routes import flat_routes
from worker.core.ids import SCOPE_KEY_MAX_LENGTH
from worker.keys.layout import BucketKeys
from worker.settings import Settings, SettingsError, load_settings

pytestmark = pytest.mark.integration

BOOT = "bootstrap-key-for-the-door-0123456789"
WebFactory = Callable[[Settings], tuple[ServedWeb, str]]
EVENT: dict[str, Any] = {
    "sourceType": "agent.user.message",
    "sourceId": "msg_door_1",
    "payload": {"topicId": "tpc_1", "message": "hi"},
}


def _bearer(credential: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {credential}"}


def _stored_events(redis_client: Redis, keys: BucketKeys) -> list[str]:
    """Event records under the test's prefix (what an accepted event leaves)."""
    return [k for k in redis_client.scan_iter(match=f"{keys.prefix}*") if ":ev:" in k]


# --- finding 1: one request froze a web process -----------------------------------------------------------


def _shapes(size: int) -> dict[str, bytes]:
    """Bodies of about ``size`` bytes that stress each step of the depth check."""
    return {
        # the attack: a quote and then escaped quotes, never closed (the old check rescanned from every quote)
        "escaped quotes": b'"' + b'\\"' * (size // 2),
        "escaped backslashes": b'"' + b"\\\\" * (size // 2),
        "backslash runs": b'["' + b'\\\\\\"[' * (size // 5) + b'"]',
        "bare quotes": b'"' * size,
        "many strings": b"[" + b'"[{",' * (size // 5) + b'""]',
        "deep, repeated": (b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH + b",") * (size // 129),
        "too deep": b"[" * size,
        "events": json.dumps({"events": [EVENT] * (size // 100)}).encode(),
    }


def test_json_depth_check_is_linear_in_the_body() -> None:
    """The depth check's work (bytes its C loops visit, summed) stays within a constant times the body for
    every shape and size; the old escape-aware regular expression rescanned from every quote (a 48 KB body
    of escaped quotes held the GIL for 13 s)."""
    from producers.http.strict_json import scan_depth  # the work counter: the old check had none

    bound = MAX_JSON_DEPTH + 5  # the module docstring's bound: five passes, then one per level
    for size in (16 * 1024, 64 * 1024, 256 * 1024, 1024 * 1024):
        for name, raw in _shapes(size).items():
            scan = scan_depth(raw, MAX_JSON_DEPTH)
            assert scan.bytes_scanned <= bound * len(raw), (name, size, scan)
    assert scan_depth(b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1), MAX_JSON_DEPTH).deeper
    assert not scan_depth(b'["' + b"[" * 100 + b'\\"]"]', MAX_JSON_DEPTH).deeper  # brackets in a string


def test_the_attack_body_is_answered_at_once(app_client: ClientFactory) -> None:
    """Through the app, a MiB of escaped quotes is a 422 (invalid JSON) like any broken body: with the old
    check this request alone would have held the process for hours."""
    client = app_client()
    response = client.post(
        "/v1/events", content=b'"' + b'\\"' * (512 * 1024), headers={"content-type": "application/json"}
    )
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "invalid_json"


# --- finding 11: a lone surrogate gave a 500, NaN and Infinity were stored ---------------------------------


@pytest.mark.parametrize(
    ("raw_value", "shown"),
    [("NaN", "NaN"), ("-Infinity", "-Infinity"), ("1e999", "1e999"), ('"\\ud800"', "lone surrogate")],
)
def test_lone_surrogates_nan_and_infinity_are_422(
    app_client: ClientFactory, redis_client: Redis, keys: BucketKeys, raw_value: str, shown: str
) -> None:
    """Each is a 422 naming the field, in a single event, a batch and a session message; nothing is stored."""
    client = app_client()
    single = '{"sourceType":"agent.user.message","sourceId":"m1","payload":{"topicId":"t","score":VALUE}}'
    bodies = [
        ("/v1/events", single.replace("VALUE", raw_value), "payload.score"),
        (
            "/v1/events",
            '{"events":[EVENT]}'.replace("EVENT", single.replace("VALUE", raw_value)),
            "events[0].payload.score",
        ),
        (
            "/v1/sessions/s1/context/messages",
            '{"messages":[{"role":"user","content":VALUE}]}'.replace("VALUE", raw_value),
            "messages.0.content",
        ),
    ]
    for path, body, field in bodies:
        response = client.post(path, content=body.encode(), headers={"content-type": "application/json"})
        assert response.status_code == 422, (path, response.text)
        error = response.json()["error"]
        assert error["field"] == field and shown in error["message"], error
    assert _stored_events(redis_client, keys) == []
    assert not [k for k in redis_client.scan_iter(match=f"{keys.prefix}*") if "ctx" in k]
    # a surrogate pair is one character, not a lone surrogate: accepted
    pair = single.replace("VALUE", '"\\ud83d\\ude00"')
    assert (
        client.post(
            "/v1/events", content=pair.encode(), headers={"content-type": "application/json"}
        ).status_code
        == 202
    )


# --- finding 6: memory before auth, no header timeout, no connection cap -----------------------------------


def _asgi_post(app: Any, path: str, headers: list[tuple[bytes, bytes]], chunk: bytes) -> tuple[int, int]:
    """POST a chunked body that never ends (``chunk`` per receive) straight to the ASGI app; returns (status,
    body bytes the app took)."""
    taken = 0
    sent: list[Message] = []

    async def receive() -> Message:
        nonlocal taken
        taken += len(chunk)
        return {"type": "http.request", "body": chunk, "more_body": True}

    async def send(message: Message) -> None:
        sent.append(message)

    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
            (b"transfer-encoding", b"chunked"),
            *headers,
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }

    async def run() -> None:
        async with app.router.lifespan_context(app):
            await app(scope, receive, send)

    anyio.run(run)
    return int(sent[0]["status"]), taken


def test_no_body_is_read_before_authentication(make_settings: SettingsFactory) -> None:
    """Without a credential a chunked body that never ends is answered 401 before one byte of it is taken
    (the body limit read up to 8 MiB of it first); with one, it is counted up to the limit and refused 413."""
    app = create_web_app(make_settings(bootstrap_key=BOOT, max_request_bytes=1024 * 1024))
    chunk = b"[" + b"0," * 8191 + b"0]"
    assert _asgi_post(app, "/v1/events", [], chunk) == (401, 0)
    status, taken = _asgi_post(app, "/v1/events", [(b"authorization", f"Bearer {BOOT}".encode())], chunk)
    assert status == 413 and taken <= 1024 * 1024 + len(chunk)


def test_a_body_read_before_a_caller_is_known_stops_at_64_kib() -> None:
    """The door's own backstop: an app that reads a body with no principal set is cut at 64 KiB (413)."""
    from producers.http.door import (  # the limit is new: the old door had none
        UNAUTHENTICATED_BYTES,
        BodyLimit,
    )

    async def reads_everything(scope: Scope, receive: Receive, send: Send) -> None:
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    limited = BodyLimit(reads_everything, max_bytes=8 * 1024 * 1024)
    taken = 0
    sent: list[Message] = []

    async def receive() -> Message:
        nonlocal taken
        taken += 4096
        return {"type": "http.request", "body": b"x" * 4096, "more_body": True}

    async def send(message: Message) -> None:
        sent.append(message)

    scope: Scope = {"type": "http", "method": "POST", "path": "/x", "headers": [], "state": {}}
    anyio.run(limited, scope, receive, send)
    assert sent[0]["status"] == 413 and taken <= UNAUTHENTICATED_BYTES + 4096


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.settimeout(30)  # waiting for something that must happen; a hang fails here
    return sock


def _read_all(sock: socket.socket) -> bytes:
    """Everything until the server closes the connection."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def _status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer else 0


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def test_unauthenticated_chunked_bodies_are_answered_while_still_sent(
    make_settings: SettingsFactory, serve_web: WebFactory
) -> None:
    """64 held connections each sending a chunked body without a credential: each is answered 401 at once,
    long before its body could end (the server read each one up to 8 MiB first)."""
    _, url = serve_web(make_settings(bootstrap_key=BOOT))
    chunk = b"[" + b"0," * 8191 + b"0]"
    socks = [_connect(_port(url)) for _ in range(64)]
    try:
        for sock in socks:
            head = "POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            sock.sendall((head + "Transfer-Encoding: chunked\r\n\r\n").encode())
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        for sock in socks:
            answer = sock.recv(65536)
            assert _status(answer) == 401, answer[:200]
    finally:
        for sock in socks:
            sock.close()


def test_a_request_head_or_body_that_does_not_arrive_in_time_is_cut_off(
    make_settings: SettingsFactory, serve_web: WebFactory
) -> None:
    """A head that never completes gets 408 and the connection closes; so does a head trickled a byte at a time
    (bytes do not extend the deadline); a connection that sends nothing is closed; a body that stops coming
    is cut off. uvicorn alone held all four open forever."""
    _, url = serve_web(make_settings(bootstrap_key=BOOT, header_timeout_s=0.5, body_timeout_s=0.5))
    port = _port(url)
    with _connect(port) as sock:
        sock.sendall(b"POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        answer = _read_all(sock)
        assert _status(answer) == 408 and b"request_timeout" in answer, answer
    with _connect(port) as sock:
        assert _read_all(sock) == b""
    with _connect(port) as sock:
        sent = 0
        head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 1000
        try:
            while not select.select([sock], [], [], 0.05)[0] and sent < len(head):
                sock.sendall(head[sent : sent + 1])
                sent += 1
            answer = _read_all(sock)
        except ConnectionResetError:  # closed while we were still sending
            answer = b""
        assert sent < len(head) and _status(answer) in (0, 408), (sent, answer)
    with _connect(port) as sock:
        post = f"POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {BOOT}\r\n"
        sock.sendall((post + "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{").encode())
        assert _read_all(sock) == b""  # closed, unanswered: the route saw its client leave


def _random_key() -> str:
    """A bearer in an API key's shape that names no key: verifying it needs a lookup."""
    return f"as_{secrets.token_hex(8)}_{secrets.token_urlsafe(32)}"


def test_failed_authentications_are_throttled_before_the_lookup(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    """Random bearers from one address cost a Redis lookup each only until the address's failure budget is
    spent; then they are 429 rate_limited with Retry-After and cost none (counted with Redis's own command
    statistics on a private server). The bootstrap key from that address, and random bearers from another
    address, are unaffected."""
    with private_redis(tmp_path) as url:
        settings = make_settings(
            redis_url=url, bootstrap_key=BOOT, auth_cache_s=0, auth_failures_per_s=0.001, auth_failure_burst=5
        )
        app = create_web_app(settings)
        lookups = Redis.from_url(url)

        def hgetall_calls() -> int:
            return int(lookups.info("commandstats").get("cmdstat_hgetall", {}).get("calls", 0))

        with TestClient(app, client=("203.0.113.7", 40000)) as attacker:
            before = hgetall_calls()
            answers = [attacker.get("/v1/events", headers=_bearer(_random_key())) for _ in range(100)]
            assert hgetall_calls() - before <= 5
            assert [a.status_code for a in answers[:5]] == [401] * 5
            throttled = answers[-1]
            assert throttled.status_code == 429 and throttled.json()["error"]["code"] == "rate_limited"
            assert int(throttled.headers["retry-after"]) >= 1
            assert {a.status_code for a in answers[5:]} == {429}
            assert attacker.get("/v1/events", headers=_bearer(BOOT)).status_code == 200
        with TestClient(app, client=("198.51.100.9", 40000)) as other:
            bearer = _random_key()
            assert other.get("/v1/events", headers=_bearer(bearer)).status_code == 401
        lookups.close()


def test_a_deleted_tenants_revoked_keys_do_not_lock_out_other_tenants_behind_the_same_address(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    """A walk of tenant deletion: the deleted tenant's app sent its revoked keys on from the address every tenant's
    backend shared, and each refusal spent that address's failed-authentication budget (the others then got 429).
    A revoked key is refused from the cache, spending nothing: 100 requests cost one lookup."""
    with private_redis(tmp_path) as url, Redis.from_url(url) as lookups:
        throttle = {"auth_failures_per_s": 0.001, "auth_failure_burst": 5}
        settings = make_settings(redis_url=url, bootstrap_key=BOOT, auth_cache_s=0, **throttle)

        def hgetall_calls() -> int:
            return int(lookups.info("commandstats").get("cmdstat_hgetall", {}).get("calls", 0))

        with TestClient(create_web_app(settings), client=("203.0.113.7", 40000)) as backend:
            gone, kept = _make_key(backend, "read", "gone"), _make_key(backend, "read", "kept")
            deleting = backend.delete("/v1/tenants/gone", headers=_bearer(BOOT))
            assert (deleting.status_code, deleting.json()["keysRevoked"]) == (200, 1), deleting.text
            before = hgetall_calls()
            assert {backend.get("/v1/events", headers=_bearer(gone)).status_code for _ in range(100)} == {401}
            assert hgetall_calls() - before == 1  # the first refusal looked; the others were the cache's
            kept_codes = [backend.get("/v1/events", headers=_bearer(kept)).status_code for _ in range(20)]
            assert kept_codes == [200] * 20  # another tenant's key, looked up each time (no cache): no 429


# --- finding 10 (the code half): ops surfaces followed the bind address -------------------------------------

OPS_SURFACES = ("/metrics", "/metrics/state", "/v1/backlog", "/openapi.json", "/docs", "/redoc")
# A valid value for every path parameter a route declares (the walk fails on a name it has no value for).
PATH_VALUES = {
    "event_id": "evt_0123456789abcdef01234567",
    "chain_id": "chain:msg_1",
    "receipt_id": "msg_1:memory:msg_1",
    "memory_id": "mem_1",
    "document_id": "doc_1",
    "session_id": "s1",
    "user_id": "u1",
    "key_id": "key_0123456789abcdef",
    "name": "notes",
    "scope_key": "topic:tpc_1",
    "tenant": "tenant-x",
}


def _make_key(client: TestClient, role: str, tenant: str = "default") -> str:
    answer = client.post("/v1/keys", json={"tenant": tenant, "role": role}, headers=_bearer(BOOT))
    assert answer.status_code == 201, answer.text
    return str(answer.json()["key"])


def test_ops_surfaces_need_a_credential_by_default(app_client: ClientFactory) -> None:
    """With credentials configured and the default settings (bound to 127.0.0.1), every ops surface is 401
    without a credential: behind a reverse proxy on the same host every caller is loopback, and the old
    default opened them by the bind address."""
    client = app_client(bootstrap_key=BOOT)
    for path in OPS_SURFACES:
        answer = client.get(path)
        assert answer.status_code == 401, (path, answer.status_code)
    reader = _make_key(client, "read")
    assert client.get("/v1/backlog", headers=_bearer(reader)).status_code == 200


def test_ops_open_loopback_is_refused_at_boot() -> None:
    """``AGENT_SIGNAL_OPS_OPEN=loopback`` stops the process with one line naming the setting and the values."""
    with pytest.raises(SettingsError) as refused:
        door_settings(load_settings(ops_open="loopback"))
    message = str(refused.value)
    assert "AGENT_SIGNAL_OPS_OPEN" in message and "always" in message and "never" in message
    assert door_settings(load_settings()).ops_open == "never"


def _grant_of(route: APIRoute) -> str | None:
    stack = list(route.dependant.dependencies)
    while stack:
        dep = stack.pop()
        if (grant := getattr(dep.call, "__agent_signal_grant__", None)) is not None:
            return str(grant)
        stack += dep.dependencies
    return None


def test_a_metrics_key_reads_only_the_ops_surfaces(app_client: ClientFactory) -> None:
    """A ``metrics`` key (made over HTTP) reads every ops surface and /readyz's detail; every other route of
    the route table answers it 403; one of another tenant, which could read none, is refused (a contract audit)."""
    client = app_client(bootstrap_key=BOOT, rate_limit_per_s=0)
    metrics = _bearer(_make_key(client, "metrics"))
    for path in OPS_SURFACES:
        assert client.get(path, headers=metrics).status_code == 200, path
    assert "checks" in client.get("/readyz", headers=metrics).json()
    walked = 0
    for route in flat_routes(client.app.routes):  # type: ignore[attr-defined]
        if not isinstance(route, APIRoute) or _grant_of(route) in ("public", "ops"):
            continue
        url = route.path
        for name in re.findall(r"{([a-zA-Z_]+)(?::path)?}", route.path):
            url = re.sub("{" + name + "(?::path)?}", PATH_VALUES[name], url)
        for method in sorted((route.methods or {"GET"}) - {"HEAD"}):
            body: dict[str, Any] | None = {} if method in ("POST", "PUT", "PATCH") else None
            answer = client.request(
                method, url + "?userId=u1&agentId=a1&topicId=t1", json=body, headers=metrics
            )
            assert answer.status_code == 403, (method, route.path, answer.status_code, answer.text[:200])
            walked += 1
    assert walked > 40
    other = client.post("/v1/keys", json={"tenant": "acme", "role": "metrics"}, headers=_bearer(BOOT))
    assert other.status_code == 422 and other.json()["error"]["field"] == "role", other.text
    assert "tenant 'default'" in other.json()["error"]["message"]


def test_a_metrics_key_from_the_cli(make_settings: SettingsFactory) -> None:
    """``agent-signal keys create --role metrics`` makes one."""
    settings = make_settings(bootstrap_key=BOOT)
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "producers.cli",
            "keys",
            "create",
            "--tenant",
            "default",
            "--role",
            "metrics",
        ],
        cwd=ROOT,
        env=settings_env(settings),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    key = json.loads(made.stdout)
    assert key["role"] == "metrics"
    with TestClient(create_web_app(settings)) as client:
        assert client.get("/metrics/state", headers=_bearer(key["key"])).status_code == 200
        assert client.get("/v1/events", headers=_bearer(key["key"])).status_code == 403


def test_readyz_answers_probes_without_detail(app_client: ClientFactory) -> None:
    """Kubernetes probes carry no credential: /readyz answers them ``{"ready"}`` and its status code only; the
    checks (the store's state) go to a key that may read the ops surfaces, not to an ingest key."""
    client = app_client(bootstrap_key=BOOT)
    bare = client.get("/readyz")
    assert bare.status_code == 200 and bare.json() == {"ready": True}
    assert client.get("/readyz", headers=_bearer(_make_key(client, "ingest"))).json() == {"ready": True}
    detailed = client.get("/readyz", headers=_bearer(_make_key(client, "read"))).json()
    assert detailed["ready"] is True and detailed["checks"]["redis"] == "ok"


# --- finding 11: ids in paths, session claims ----------------------------------------------------------------

# Ids the id rules refuse, percent-encoded for a URL; user ids also refuse ':' (alice:agt_1 aliased alice's keys).
BAD_IDS = {  # a scope key may be as long as a derived one gets (SCOPE_KEY_MAX_LENGTH)
    "name_ids": ("alice:agt_1", "bad%20id", "x%1Fy"),
    "ids": ("bad%20id", "x%1Fy", "a" * 257),
    "scope_keys": ("bad%20id", "x%1Fy", "a" * (SCOPE_KEY_MAX_LENGTH + 1)),
}
NAME_ID_PARAMS = frozenset({"user_id"})
SCOPE_KEY_PARAMS = frozenset({"scope_key"})


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _snapshot(redis_client: Redis, keys: BucketKeys) -> dict[str, Any]:
    """Every data key under the test's prefix with its content (counters and the rate buckets left out)."""
    found: dict[str, Any] = {}
    for key in redis_client.scan_iter(match=f"{keys.prefix}*"):
        if key.endswith(("stats", "metrics")) or ":ratelimit:" in key or ":broker:" in key:
            continue
        kind = redis_client.type(key)
        found[key] = redis_client.dump(key) if kind != "stream" else redis_client.xlen(key)
    return found


def test_every_id_in_a_path_is_checked_before_any_side_effect(
    app_client: ClientFactory, redis_client: Redis, keys: BucketKeys
) -> None:
    """Every route with a path parameter (read from the route table) answers a refused id with a 422 naming
    the parameter as the API names it (``userId``), and nothing in Redis changes: ``DELETE
    /v1/users/alice:agt_1`` ran an erasure for an id that aliases alice's keys, and ``PUT
    /v1/features/self-iteration/{id}`` stored an override under any string."""
    client = app_client(bootstrap_key=BOOT, rate_limit_per_s=0)
    operator = _bearer(BOOT)
    client.put("/v1/features/self-iteration/alice", json={"enabled": False}, headers=operator)
    before = _snapshot(redis_client, keys)
    walked = 0
    for route in flat_routes(client.app.routes):  # type: ignore[attr-defined]
        if not isinstance(route, APIRoute) or _grant_of(route) == "public":
            continue
        names = re.findall(r"{([a-zA-Z_]+)(?::path)?}", route.path)
        for bad_name in names:
            kind = "name_ids" if bad_name in NAME_ID_PARAMS else "ids"
            kind = "scope_keys" if bad_name in SCOPE_KEY_PARAMS else kind
            for bad in BAD_IDS[kind]:
                url = route.path
                for name in names:
                    value = bad if name == bad_name else PATH_VALUES[name]
                    url = re.sub("{" + name + "(?::path)?}", value, url)
                for method in sorted((route.methods or {"GET"}) - {"HEAD"}):
                    body: dict[str, Any] | None = {"enabled": True} if method in ("POST", "PUT") else None
                    answer = client.request(
                        method, url + "?userId=u1&agentId=a1", json=body, headers=operator
                    )
                    where = (method, route.path, bad)
                    assert answer.status_code == 422, (*where, answer.status_code, answer.text[:200])
                    assert answer.json()["error"]["field"] == _camel(bad_name), (*where, answer.text[:200])
                    walked += 1
    assert walked > 60
    assert _snapshot(redis_client, keys) == before


def test_a_session_is_claimed_only_after_its_id_is_checked(
    app_client: ClientFactory, redis_client: Redis, keys: BucketKeys
) -> None:
    """A user token's PUT of a session id the routes refuse is a 422 naming sessionId and claims nothing (the
    claim used to be written before the id was checked, leaving a session record for an id nobody can use)."""
    client = app_client(bootstrap_key=BOOT, rate_limit_per_s=0)
    token = client.post("/v1/tokens", json={"userId": "u1"}, headers=_bearer(BOOT)).json()["token"]
    before = _snapshot(redis_client, keys)
    for bad in ("bad%20id", "a" * 201, "x%21y"):
        answer = client.put(f"/v1/sessions/{bad}", json={}, headers=_bearer(token))
        assert answer.status_code == 422 and answer.json()["error"]["field"] == "sessionId", answer.text
    assert _snapshot(redis_client, keys) == before
    good = client.put("/v1/sessions/s-ok", json={}, headers=_bearer(token))
    assert good.status_code == 200 and good.json()["userId"] == "u1"


def test_the_ui_keeps_a_typed_key_for_the_tab_only(
    make_settings: SettingsFactory, serve_web: WebFactory
) -> None:
    """A key typed into the UI is kept in sessionStorage (the tab's life), never in localStorage (no expiry),
    and API calls carry it; a key an older version left in localStorage is removed when the page loads."""
    from tests.support.browser import chromium

    _, url = serve_web(make_settings(bootstrap_key=BOOT))
    with chromium() as browser:
        page = browser.new_page()
        errors: list[str] = []
        sent: list[str | None] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{url}/")
        page.evaluate("localStorage.setItem('agentSignalToken', 'left-by-an-older-version')")
        page.reload()
        page.wait_for_selector("#api-token", state="attached")  # reload() waited for load: app.js has run
        assert page.evaluate("localStorage.getItem('agentSignalToken')") is None
        page.on("request", lambda r: sent.append(r.headers.get("authorization")) if "/v1/" in r.url else None)
        page.click("details.token > summary")
        page.fill("#api-token", BOOT)
        page.dispatch_event("#api-token", "change")
        page.wait_for_function("() => sessionStorage.getItem('agentSignalToken') !== null")
        assert page.evaluate("sessionStorage.getItem('agentSignalToken')") == BOOT
        assert page.evaluate("localStorage.getItem('agentSignalToken')") is None
        wait_for(lambda: f"Bearer {BOOT}" in sent, timeout_s=15, what="an API call with the typed key")
    assert errors == []
