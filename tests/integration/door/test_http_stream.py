"""The receipts stream (server-sent events) in-process, on a real Redis: it listens with ``redis.asyncio``
(the event loop never waits on a socket), delivers a receipt once, and closes cleanly when the client goes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from producers.http.app import create_web_app
from producers.http.streams.feed import Feed
from tests.conftest import wait_for
from worker.keys.layout import BucketKeys
from worker.store.receipts import ReceiptStore

pytestmark = [pytest.mark.integration, pytest.mark.buckets]

OWNER = {"userId": "u1", "agentId": "a1", "topicId": "t1"}
BOOTSTRAP_KEY = "http-stream-tests-bootstrap-key-0123456789"


@pytest.fixture
def client(make_settings: Any) -> Iterator[TestClient]:
    with TestClient(create_web_app(make_settings())) as c:
        yield c


def test_stream_delivers_a_receipt(client: TestClient, redis_client: Redis, keys: BucketKeys) -> None:
    """After ``: connected`` the subscription is live: a receipt appended then arrives as one SSE event."""
    receipt = {"id": "rcpt_1", **OWNER, "createdAt": 1, "kind": "memory", "metadata": {}}
    with client.stream("GET", "/v1/receipts/stream", params=OWNER) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = response.iter_lines()
        assert next(lines) == ": connected"
        assert next(lines) == ""
        ReceiptStore(redis_client, keys, ttl_s=60).append(receipt)
        event = [line for line in (next(lines) for _ in range(4)) if line]
    assert event[:2] == ["event: receipt", "id: rcpt_1"]
    assert json.loads(event[2].removeprefix("data: ")) == receipt


def test_streams_open_and_close_repeatedly(make_settings: Any, redis_client: Redis, keys: BucketKeys) -> None:
    """Each stream takes a slot in the process's count and in its tenant's (credentials configured) and gives
    both back when the client disconnects: after every stream, both counts are back to zero (well within the
    slots' lease, so a slot left to lapse would fail it)."""
    auth = {"authorization": f"Bearer {BOOTSTRAP_KEY}"}
    tenant_slots = keys.for_tenant("default").open_streams
    settings = make_settings(bootstrap_key=BOOTSTRAP_KEY, lease_ttl_s=60.0, lease_renew_interval_s=10.0)
    with TestClient(create_web_app(settings)) as client:
        feed: Feed = client.app.state.feed  # type: ignore[attr-defined]
        for _ in range(5):
            with client.stream("GET", "/v1/receipts/stream", params=OWNER, headers=auth) as response:
                assert next(response.iter_lines()) == ": connected"
                assert (feed.open_streams, redis_client.zcard(tenant_slots)) == (1, 1)
            wait_for(
                lambda: (feed.open_streams, redis_client.zcard(tenant_slots)) == (0, 0),
                timeout_s=10,
                what="the stream's slots to be given back",
            )
        assert client.get("/v1/receipts/stream", headers=auth).json()["error"]["field"] == "userId"


def _frames(lines: Iterator[str], n: int) -> list[list[str]]:
    """The next ``n`` frames (their lines, up to the blank line that ends each)."""
    frames: list[list[str]] = []
    while len(frames) < n:
        frame: list[str] = []
        while line := next(lines):
            frame.append(line)
        frames.append(frame)
    return frames


def test_a_receipt_id_cannot_write_frames(client: TestClient, redis_client: Redis, keys: BucketKeys) -> None:
    """A receipt id with CR, LF and NUL in it (stored by a path the door does not check) is one event: its
    ``id:`` line holds no control character and the JSON keeps the id whole; no frame of its making follows."""
    forged = 'op1\n\nevent: receipt\ndata: {"id":"forged"}\r\n\x00:writeMemory:memory'
    store = ReceiptStore(redis_client, keys, ttl_s=60)
    with client.stream("GET", "/v1/receipts/stream", params=OWNER) as response:
        lines = response.iter_lines()
        assert _frames(lines, 1) == [[": connected"]]
        store.append({"id": forged, **OWNER, "createdAt": 1})
        store.append({"id": "rcpt_after", **OWNER, "createdAt": 2})
        first, second = _frames(lines, 2)
    assert first[:2] == ["event: receipt", 'id: op1event: receiptdata: {"id":"forged"}:writeMemory:memory']
    assert json.loads(first[2].removeprefix("data: "))["id"] == forged and len(first) == 3
    assert second[:2] == ["event: receipt", "id: rcpt_after"]


def test_a_reconnect_with_last_event_id_gets_a_resync_first(client: TestClient) -> None:
    """A client that sends ``Last-Event-ID`` (a browser's EventSource reconnecting) is told to re-read the list
    right after ``: connected``: what was written while it was away was never announced to it."""
    headers = {"Last-Event-ID": "rcpt_1"}
    with client.stream("GET", "/v1/receipts/stream", params=OWNER, headers=headers) as response:
        assert _frames(response.iter_lines(), 2) == [[": connected"], ["event: resync", "data: {}"]]
