"""A full store (``noeviction`` at ``maxmemory``) and the door with credentials configured (rate limits on, their
defaults): the credential's rate bucket is a write the full store refuses, and every authenticated route answered
``503 store_unavailable``, ``/readyz`` too, so ``agent-signal probe web`` failed and Kubernetes would take every
web pod out of its Service, while the reads that show an operator why and the writes that free memory were
refused (a resource walk). Now such a request passes uncharged: readiness says the store is full and stays ready,
reads answer, and a write the full store refuses is its own ``503``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from producers import Producer
from producers.http.app import create_web_app
from tests.support.private_redis import private_redis

pytestmark = pytest.mark.integration

BOOT = "bootstrap-key-for-the-full-store-0123456789"


def test_a_full_store_leaves_readiness_and_reads_to_an_authenticated_caller(
    tmp_path: Path, make_settings: Any
) -> None:
    with private_redis(tmp_path, "--maxmemory", "16mb", "--maxmemory-policy", "noeviction") as url:
        settings = make_settings(redis_url=url, bootstrap_key=BOOT)
        client = Redis.from_url(url, decode_responses=True)
        admin = {"Authorization": f"Bearer {BOOT}"}
        event = {"sourceType": "agent.user.message", "sourceId": "before-full", "scopeKey": "topic:full"}
        producer = Producer(settings)
        producer.enqueue({**event, "payload": {"message": "hi"}})
        producer.close()
        # full before the door's first request: its credential holds no token yet, so each request charges the store
        client.setrange("fill:pad", 24 * 1024 * 1024, "x")  # well over maxmemory
        with TestClient(create_web_app(settings), base_url="http://127.0.0.1") as web:
            try:
                ready = web.get("/readyz", headers=admin)
                assert ready.status_code == 200, ready.text
                assert ready.json()["ready"] is True and ready.json()["checks"]["memory"].startswith("full: ")
                listed = web.get("/v1/events", params={"limit": 5}, headers=admin)
                assert listed.status_code == 200, listed.text
                assert [e["sourceId"] for e in listed.json()["events"]] == ["before-full"]
                refused = web.post(
                    "/v1/events", json={**event, "sourceId": "while-full", "payload": {}}, headers=admin
                )
                assert refused.status_code == 503 and refused.json()["error"]["code"] == "store_unavailable"
            finally:
                client.delete("fill:pad")
        client.close()
