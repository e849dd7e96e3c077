"""Receipt streams cannot starve the web process (issue 12).

The finding: about 100 open ``GET /v1/receipts/stream`` connections exhausted the web process's Redis
connections and every endpoint, ingest included, answered 500, because each stream held its own pub/sub
connection. Now one subscriber per process serves every stream (producers/http/streams/feed.py), streams are capped per
credential and in total, and a slow client loses its backlog instead of holding anyone up.

The load test runs a real ``agent-signal web`` process whose redis-py clients carry a client name (set in
the Redis URL), so ``CLIENT LIST`` counts exactly that process's connections.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import httpx
import pytest
from fastapi.testclient import TestClient
from redis import Redis

from producers.http.app import create_web_app
from producers.http.streams.feed import RESYNC, Feed, Listener, Resync
from tests.conftest import wait_for
from tests.support.browser import chromium
from worker.keys.layout import BucketKeys
from worker.settings import Settings, kombu_url_for
from worker.store.receipts import ReceiptStore

pytestmark = pytest.mark.integration

STREAMS = 500
USERS = 25  # the 500 streams spread over 25 users' channels (20 streams each)
REQUESTS = 15  # concurrent ingests, and as many concurrent reads, while the streams are open
POOL = 5  # the web process's AGENT_SIGNAL_REDIS_MAX_CONNECTIONS here: each of its two blocking pools holds at most 5
# Under 50 by construction, however loaded the machine: the door's and the credentials' pools (2 x POOL), the one
# subscriber, and the rate limiter's asyncio client, which opens no more connections than requests in flight.
MAX_REDIS_CLIENTS = 50
assert 2 * POOL + 1 + 2 * REQUESTS < MAX_REDIS_CLIENTS
OWNER = {"userId": "u1", "agentId": "a1", "topicId": "t1"}
STREAM_PATH = "/v1/receipts/stream"


def _receipt(receipt_id: str, user_id: str, created_at: int = 1) -> dict[str, Any]:
    return {"id": receipt_id, "userId": user_id, "agentId": "a1", "topicId": "t1", "createdAt": created_at}


def _named(redis_url: str, name: str) -> str:
    """The URL with a client name: every redis-py connection made from it runs CLIENT SETNAME."""
    return f"{redis_url}{'&' if '?' in redis_url else '?'}client_name={name}"


def _clients_named(redis: Redis, name: str) -> list[dict[str, Any]]:
    return [client for client in redis.client_list() if client.get("name") == name]


def _subscriptions(clients: list[dict[str, Any]]) -> list[int]:
    """How many channels each connection in pub/sub mode (flag ``P`` in CLIENT LIST) is subscribed to."""
    return [int(c["sub"]) for c in clients if "P" in str(c.get("flags", ""))]


def _tcp_sockets_to(pid: int, port: int) -> int:
    """Established TCP connections of process ``pid`` to ``port`` (its Redis sockets, broker ones included)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    count = 0
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if fields[9] in inodes and remote_port == port and fields[3] == "01":
                count += 1
    return count


# --- raw streams: 500 of them are lighter as asyncio sockets than as httpx streams ----------------------


OPEN_ATTEMPTS = (
    5  # a stream refused 503 (its SUBSCRIBE not confirmed in time: a loaded machine) is opened again
)


async def _open_stream(
    host: str, port: int, user_id: str, refusals: list[bytes]
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """An open stream, returned once the server said ``: connected`` (its subscription is live). A ``503
    store_unavailable`` is the contract's answer when the store does not confirm the subscription within 5 s
    (producers/http/streams/feed.py), which a loaded machine can take with 500 streams opening at once: the
    stream is opened again after its ``Retry-After``, as a client does, at most OPEN_ATTEMPTS times, and each
    refusal is kept in ``refusals``. Any other answer fails with what the server sent."""
    query = urlencode({"userId": user_id, "agentId": "a1", "topicId": "t1"})
    request = (
        f"GET {STREAM_PATH}?{query} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: text/event-stream\r\n\r\n"
    )
    for _ in range(OPEN_ATTEMPTS):
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(request.encode())
        await writer.drain()
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            if head.startswith(b"HTTP/1.1 200"):
                await reader.readuntil(b": connected")
                return reader, writer
            headers = dict(line.lower().split(b": ", 1) for line in head.split(b"\r\n")[1:] if b": " in line)
            body = await reader.readexactly(int(headers.get(b"content-length", b"0")))
        except asyncio.IncompleteReadError as exc:
            raise AssertionError(
                f"the stream of {user_id} ended before ': connected': {exc.partial[:600]!r}"
            ) from None
        writer.close()
        assert head.startswith(b"HTTP/1.1 503") and b"store_unavailable" in body, (head + body)[:600]
        refusals.append(head + body)
        await asyncio.sleep(float(headers.get(b"retry-after", b"1")))
    raise AssertionError(f"the stream of {user_id} was refused {OPEN_ATTEMPTS} times: {refusals[-1][:600]!r}")


async def _read_until(reader: asyncio.StreamReader, needle: bytes) -> bytes:
    data = b""
    while needle not in data:
        chunk = await reader.read(65536)
        if not chunk:
            raise AssertionError(f"the stream ended before {needle!r}: {data[-300:]!r}")
        data += chunk
    return data


def _event(i: int) -> dict[str, Any]:
    return {
        "sourceType": "agent.user.message",
        "sourceId": f"load-{i}",
        "userId": f"u{i % USERS}",
        "agentId": "a1",
        "payload": {"agentId": "a1", "topicId": "t1", "messageId": f"load-{i}", "message": "hello"},
    }


async def _while_500_streams_are_open(
    url: str, redis: Redis, keys: BucketKeys, measure: Callable[[], dict[str, int]]
) -> dict[str, int]:
    """Open the streams; measure; ingest and read; publish a receipt and see it reach its streams."""
    parts = urlsplit(url)
    host, port = str(parts.hostname), int(parts.port or 80)
    refusals: list[bytes] = []
    streams = await asyncio.gather(
        *(_open_stream(host, port, f"u{i % USERS}", refusals) for i in range(STREAMS))
    )
    try:
        counts = {"streams open": len(streams), "opens refused 503, then retried": len(refusals), **measure()}
        limits = httpx.Limits(max_connections=600, max_keepalive_connections=100)
        async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as client:
            posts = [client.post("/v1/events", json=_event(i)) for i in range(REQUESTS)]
            reads = [client.get("/v1/receipts", params={"userId": f"u{i}"}) for i in range(REQUESTS)]
            answers = await asyncio.gather(*posts, *reads)
        assert [a.status_code for a in answers[:REQUESTS]] == [202] * REQUESTS, answers[0].text
        assert [a.status_code for a in answers[REQUESTS:]] == [200] * REQUESTS, answers[-1].text
        counts.update({f"{name} after {2 * REQUESTS} requests": n for name, n in measure().items()})

        # A receipt for u0 reaches all 20 of u0's streams; u1's stream, which gets u1's receipt appended
        # after it, saw nothing of u0's before it (one connection delivers in order).
        store = ReceiptStore(redis, keys, ttl_s=60)
        store.append(_receipt("rcpt_live_u0", "u0"))
        store.append(_receipt("rcpt_live_u1", "u1"))
        u0 = [reader for i, (reader, _) in enumerate(streams) if i % USERS == 0]
        seen = await asyncio.gather(*(_read_until(reader, b"id: rcpt_live_u0") for reader in u0))
        assert len(seen) == STREAMS // USERS
        u1_seen = await _read_until(streams[1][0], b"id: rcpt_live_u1")
        assert b"rcpt_live_u0" not in u1_seen
        return counts
    finally:
        for _, writer in streams:
            writer.close()


def test_receipt_streams_do_not_exhaust_the_pool(
    make_settings: Any, start_web: Any, redis_client: Redis, keys: BucketKeys, redis_url: str, prefix: str
) -> None:
    """With 500 streams open on one web process, ingest and reads answer 2xx, the process's Redis clients
    stay under 50, one pub/sub connection serves every stream, and a receipt published after the streams
    opened reaches its streams.

    What it waits on, never a clock: each stream counts as open once the server sent ``: connected``, which it
    sends only after Redis confirmed the channel's SUBSCRIBE; the receipts are awaited as frames on the
    streams. What it counts is the server's own view (CLIENT LIST): the connections in pub/sub mode, and how
    many channels each is subscribed to. It used to compare the process's connection count with a baseline
    (at most one more), which was red under load: requests that overlap (a stream's opening re-checks the
    credentials with SCARD once the process's cache of that answer expires) grow the request pools by as
    many idle connections as there were concurrent requests, so the count measured the machine's load, not
    the streams. A stream holding its own connection would show here as one more pub/sub connection. The
    pools are capped at POOL connections with a long wait for a free one, so the bound on all clients holds
    by construction (see MAX_REDIS_CLIENTS) and a slow machine makes requests wait, never fail."""
    marker = f"{prefix}web"
    settings = make_settings(
        redis_url=_named(redis_url, marker),
        broker_url=kombu_url_for(redis_url),  # kombu refuses client_name; its connections are not named
        max_streams_per_credential=STREAMS + 100,  # AGENT_SIGNAL_MAX_STREAMS_PER_CREDENTIAL in the child
        redis_max_connections=POOL,
        redis_pool_timeout_s=120,  # a request waits for a pool connection, however slow the machine: never a 503
    )
    proc, url = start_web(settings)
    assert httpx.get(f"{url}/v1/receipts", params={"userId": "u0"}, timeout=10).status_code == 200
    redis_port = urlsplit(redis_url).port if redis_url.startswith("redis://") else None
    subscriptions: list[list[int]] = []

    def measure() -> dict[str, int]:
        clients = _clients_named(redis_client, marker)
        subscriptions.append(_subscriptions(clients))
        counts = {"named redis clients": len(clients)}
        if redis_port is not None:
            counts["tcp sockets to redis"] = _tcp_sockets_to(proc.pid, redis_port)
        return counts

    baseline = measure()
    counts = asyncio.run(_while_500_streams_are_open(url, redis_client, keys, measure))
    print(f"\nbaseline {baseline}; with {STREAMS} streams {counts}; subscriptions {subscriptions}")
    bounded = {name: n for name, n in counts.items() if name.startswith(("named", "tcp"))}
    # A loaded machine may confirm one channel's SUBSCRIBE late (its waiting streams refused together); more
    # than one channel's worth refused is a feed that loses confirmations, not load.
    assert counts["opens refused 503, then retried"] <= STREAMS // USERS, counts
    assert all(n < MAX_REDIS_CLIENTS for n in bounded.values()), (baseline, counts)
    # No subscriber before the first stream; then one, on the 25 users' channels, while 500 streams are open
    # and after 30 requests.
    assert subscriptions == [[], [USERS], [USERS]], subscriptions


# --- in-process: caps, ownership, tenants, one subscription per channel ----------------------------------


BOOTSTRAP_KEY = "stream-tests-bootstrap-key-0123456789"


def _bearer(secret: str) -> dict[str, str]:
    return {"authorization": f"Bearer {secret}"}


def _key(client: TestClient, tenant: str = "default", role: str = "read") -> dict[str, str]:
    """Headers carrying a new API key of ``tenant`` (made with the bootstrap key over ``POST /v1/keys``)."""
    made = client.post("/v1/keys", json={"tenant": tenant, "role": role}, headers=_bearer(BOOTSTRAP_KEY))
    assert made.status_code == 201, made.text
    return _bearer(made.json()["key"])


def _user_token(client: TestClient, user_id: str) -> dict[str, str]:
    minted = client.post("/v1/tokens", json={"userId": user_id}, headers=_key(client, role="operate"))
    assert minted.status_code == 200, minted.text
    return _bearer(minted.json()["token"])


@pytest.fixture
def app_with(make_settings: Any) -> Iterator[Callable[..., TestClient]]:
    """Factory: an in-process app with credentials configured (a bootstrap key), started."""
    clients: list[TestClient] = []

    def make(**overrides: Any) -> TestClient:
        client = TestClient(create_web_app(make_settings(bootstrap_key=BOOTSTRAP_KEY, **overrides)))
        clients.append(client.__enter__())
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)


def _feed(client: TestClient) -> Feed:
    feed: Feed = client.app.state.feed  # type: ignore[attr-defined]
    return feed


@pytest.mark.parametrize(
    ("overrides", "third_is_another_key"),
    [({"max_streams_per_credential": 2}, False), ({"max_streams": 2}, True)],
    ids=["per-credential", "per-process"],
)
def test_streams_over_a_cap_answer_429(
    app_with: Callable[..., TestClient], overrides: dict[str, int], third_is_another_key: bool
) -> None:
    """Over the per-credential or the per-process cap a stream answers 429 too_many_streams with
    Retry-After; under the per-credential cap another credential still gets its own streams; closing a
    stream gives its slot back."""
    client = app_with(**overrides)
    key_a, key_b = _key(client), _key(client)
    with (
        client.stream("GET", STREAM_PATH, params=OWNER, headers=key_a) as first,
        client.stream("GET", STREAM_PATH, params=OWNER, headers=key_a) as second,
    ):
        assert next(first.iter_lines()) == next(second.iter_lines()) == ": connected"
        refused = client.get(STREAM_PATH, params=OWNER, headers=key_b if third_is_another_key else key_a)
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == "too_many_streams"
        assert int(refused.headers["retry-after"]) > 0
        if not third_is_another_key:
            with client.stream("GET", STREAM_PATH, params=OWNER, headers=key_b) as other:
                assert other.status_code == 200, other.read()
    wait_for(lambda: _feed(client).open_streams == 0, timeout_s=10, what="the streams' slots to be released")
    with client.stream("GET", STREAM_PATH, params=OWNER, headers=key_a) as again:
        assert again.status_code == 200


def test_a_user_token_streams_only_its_own_user(app_with: Callable[..., TestClient]) -> None:
    """A user token asking for another userId's stream gets 404 (nothing is revealed); its own opens."""
    client = app_with()
    as_u1 = _user_token(client, "u1")
    refused = client.get(STREAM_PATH, params={**OWNER, "userId": "u2"}, headers=as_u1)
    assert refused.status_code == 404, refused.text
    assert refused.json()["error"]["code"] == "not_found"
    with client.stream("GET", STREAM_PATH, params=OWNER, headers=as_u1) as own:
        assert next(own.iter_lines()) == ": connected"


def test_streams_share_one_subscription_and_stay_in_their_tenant(
    app_with: Callable[..., TestClient], redis_client: Redis, keys: BucketKeys
) -> None:
    """Three streams of one channel hold one Redis subscription (none once they close); a receipt of
    tenant acme reaches acme's stream and not the default tenant's stream of the same user."""
    client = app_with()
    channel = keys.receipts_feed("u1")
    mine, acme = _key(client), _key(client, tenant="acme")
    with (
        client.stream("GET", STREAM_PATH, params=OWNER, headers=mine) as a,
        client.stream("GET", STREAM_PATH, params=OWNER, headers=mine) as b,
        client.stream("GET", STREAM_PATH, params=OWNER, headers=mine) as c,
        client.stream("GET", STREAM_PATH, params=OWNER, headers=acme) as theirs,
    ):
        default_lines = [stream.iter_lines() for stream in (a, b, c)]
        acme_lines = theirs.iter_lines()
        assert [next(lines) for lines in [*default_lines, acme_lines]] == [": connected"] * 4
        assert redis_client.pubsub_numsub(channel) == [(channel, 1)]
        ReceiptStore(redis_client, keys.for_tenant("acme"), ttl_s=60).append(_receipt("rcpt_acme", "u1"))
        ReceiptStore(redis_client, keys, ttl_s=60).append(_receipt("rcpt_default", "u1"))
        ReceiptStore(redis_client, keys.for_tenant("acme"), ttl_s=60).append(_receipt("rcpt_acme_2", "u1"))
        assert [_next_event_id(acme_lines) for _ in range(2)] == ["rcpt_acme", "rcpt_acme_2"]
        # had rcpt_acme leaked into the default tenant's streams, it would have come first
        assert [_next_event_id(lines) for lines in default_lines] == ["rcpt_default"] * 3
    wait_for(lambda: redis_client.pubsub_numsub(channel) == [(channel, 0)], timeout_s=10, what="UNSUBSCRIBE")


def _next_event_id(lines: Iterator[str]) -> str:
    for line in lines:
        if line.startswith("id: "):
            return line.removeprefix("id: ")
    raise AssertionError("the stream ended")


# --- the feed itself: slow clients and a Redis that drops -------------------------------------------------


@asynccontextmanager
async def _running(settings: Settings, **options: Any) -> AsyncIterator[Feed]:
    feed = Feed(settings, max_streams=10, max_streams_per_credential=10, **options)
    try:
        yield feed
    finally:
        await feed.aclose()


async def _take(listener: Listener, n: int) -> list[str | Resync]:
    items: list[str | Resync] = []
    async for item in listener:
        items.append(item)
        if len(items) == n:
            break
    return items


def test_a_slow_listener_drops_its_oldest_and_gets_a_resync_hint(
    make_settings: Any, redis_client: Redis
) -> None:
    """A listener that does not read loses its backlog and is told to resync; the other listener of the
    same channel gets every message in order, undelayed."""
    channel = f"{make_settings().key_prefix}test-feed"

    async def scenario() -> tuple[list[str | Resync], list[str | Resync]]:
        async with _running(make_settings(), queue_size=4) as feed:
            fast = await feed.listen(channel, "key_a")
            slow = await feed.listen(channel, "key_b")
            received: list[str | Resync] = []
            for i in range(10):  # the fast one reads each message before the next is published
                redis_client.publish(channel, f"m{i}")
                received += await _take(fast, 1)
            return received, await _take(slow, 4)  # each message reached both queues in one dispatch

    fast_items, slow_items = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert fast_items == [f"m{i}" for i in range(10)]
    assert slow_items == [RESYNC, "m7", "m8", "m9"]


def test_the_feed_resubscribes_after_redis_drops_it(
    make_settings: Any, redis_client: Redis, redis_url: str
) -> None:
    """When Redis closes the feed's connection, listeners get a resync hint and, once the feed has
    reconnected and resubscribed, messages published afterwards reach them."""
    marker = f"{make_settings().key_prefix}feed"
    channel = f"{make_settings().key_prefix}test-feed"

    async def scenario() -> list[str | Resync]:
        async with _running(make_settings(redis_url=_named(redis_url, marker))) as feed:
            listener = await feed.listen(channel, "key_a")
            (victim,) = [c for c in redis_client.client_list() if c.get("name") == marker]
            redis_client.client_kill_filter(_id=victim["id"])
            items = await _take(listener, 1)
            while redis_client.pubsub_numsub(channel) != [(channel, 1)]:
                await asyncio.sleep(0.02)  # polling the subscription count, not a fixed wait
            redis_client.publish(channel, "after")
            return items + await _take(listener, 1)

    assert asyncio.run(asyncio.wait_for(scenario(), 30)) == [RESYNC, "after"]


# --- the browser UI: the token stays out of URLs, and the stream carries it in a header -------------------


def test_the_ui_streams_with_a_token_from_the_page_fragment(
    make_settings: Any, start_web: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """A user token given as ``#…&token=`` is moved to sessionStorage and removed from the address bar, no
    request URL carries it, the receipts stream sends it as ``Authorization`` and goes live, and a receipt
    appended afterwards appears under its message through the stream."""
    _, url = start_web(make_settings(bootstrap_key=BOOTSTRAP_KEY))
    made = httpx.post(f"{url}/v1/keys", json={"role": "operate"}, headers=_bearer(BOOTSTRAP_KEY), timeout=10)
    minted = httpx.post(
        f"{url}/v1/tokens", json={"userId": "u1"}, headers=_bearer(made.json()["key"]), timeout=10
    )
    token = minted.json()["token"]
    message = {"id": "msg_1", "role": "assistant", "content": "Short answers it is.", "createdAt": 1}
    redis_client.rpush(keys.conversation("u1", "a1", "t1"), json.dumps(message))
    with chromium() as browser:
        page = browser.new_page()
        errors: list[str] = []
        seen: list[tuple[str, str | None]] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("request", lambda request: seen.append((request.url, request.headers.get("authorization"))))
        page.goto(f"{url}/#/conversation?userId=u1&agentId=a1&topicId=t1&token={token}")
        page.wait_for_selector(".live:text-is('Live')", timeout=15_000)
        assert "token" not in page.url and page.url.endswith("#/conversation?userId=u1&agentId=a1&topicId=t1")
        assert page.evaluate("sessionStorage.getItem('agentSignalToken')") == token
        receipt = {**_receipt("rcpt_ui", "u1", 2), "anchorMessageId": "msg_1", "kind": "memory"}
        ReceiptStore(redis_client, keys, ttl_s=60).append({**receipt, "title": "Prefers short answers"})
        page.wait_for_selector(
            '[data-message-id="msg_1"] .receipt[data-receipt-id="rcpt_ui"]', timeout=15_000
        )
        assert page.locator(".live").inner_text() == "Live"  # it came through the stream, not by polling
    api_calls = [(address, auth) for address, auth in seen if "/v1/" in address]
    assert [auth for address, auth in api_calls if STREAM_PATH in address][:1] == [f"Bearer {token}"]
    assert all(auth == f"Bearer {token}" for _, auth in api_calls), api_calls
    assert not any(token in address for address, _ in seen), "the token appeared in a request URL"
    assert errors == []
