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
from worker.keys.layout import BucketKeys
from worker.store.receipts import ReceiptStore

pytestmark = [pytest.mark.integration, pytest.mark.buckets]

OWNER = {"userId": "u1", "agentId": "a1", "topicId": "t1"}


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


def test_streams_open_and_close_repeatedly(client: TestClient) -> None:
    """Each stream holds one pub/sub connection and gives it back when the client disconnects."""
    for _ in range(5):
        with client.stream("GET", "/v1/receipts/stream", params=OWNER) as response:
            assert next(response.iter_lines()) == ": connected"
    assert client.get("/v1/receipts/stream").json()["error"]["field"] == "userId"
