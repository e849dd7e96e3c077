"""The operators' view of workers, on a real worker: its heartbeat, the concurrency it runs with, and the drain
it holds right now (a lease token names its worker), as ``GET /v1/scopes`` and ``GET /v1/overview`` show them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from producers.http.app import create_web_app
from tests.conftest import wait_for
from worker.keys.layout import BucketKeys

pytestmark = pytest.mark.integration


def test_a_held_drain_names_its_worker(
    make_settings: Any, start_worker: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    settings = make_settings()
    worker = start_worker(settings, concurrency=1)
    with TestClient(create_web_app(settings)) as client:
        event = {"sourceType": "test.two-step", "sourceId": "held-1", "scopeKey": "topic:held", "payload": {}}
        assert client.post("/v1/events", json=event).status_code == 202
        wait_for(
            lambda: redis_client.get(f"{keys.bucket_prefix}test:two-step-started:held-1"),
            what="the first action",
        )
        busy = client.get("/v1/scopes", params={"state": "busy"}).json()["scopes"]
        assert [(s["scopeKey"], s.get("leaseHolder")) for s in busy] == [("topic:held", worker.hostname_hint)]
        seen = {w["name"]: w for w in client.get("/v1/overview").json()["workers"]}
        assert seen[worker.hostname_hint]["concurrency"] == 1
        assert seen[worker.hostname_hint]["inFlight"] == 1
        redis_client.set(f"{keys.bucket_prefix}test:two-step-go:held-1", "1")
        wait_for(
            lambda: client.get("/v1/events/held-1").json().get("status") == "done", what="the event to finish"
        )
        seen = {w["name"]: w for w in client.get("/v1/overview").json()["workers"]}
        assert seen[worker.hostname_hint]["inFlight"] == 0


def test_a_worker_silent_for_over_an_hour_is_forgotten(make_settings: Any, redis_client: Redis) -> None:
    """A worker killed without its shutdown hook (SIGKILL) stayed in ``workers`` for good, one more "silent" row
    per crashed pod; the sweeper now drops one silent for over an hour (and its info), and keeps the rest."""
    from worker.ops.workers_view import FORGET_SILENT_AFTER_MS, forget_silent_workers
    from worker.store.events import EventStore

    store = EventStore(redis_client, make_settings())
    engine = store.keys
    now = 10_000_000_000
    beats = {"gone@a": now - FORGET_SILENT_AFTER_MS - 1, "live@b": now - 1000, "junk@c": "not a time"}
    redis_client.hset(engine.workers, mapping=beats)
    # an older release's clean shutdown left its info without a beat; a worker just ready may not have beaten yet
    old_info = json.dumps({"startedAt": now - FORGET_SILENT_AFTER_MS - 1})
    new_info = json.dumps({"startedAt": now - 1000})
    info = {"gone@a": "{}", "live@b": "{}", "stopped@d": old_info, "starting@e": new_info}
    redis_client.hset(engine.worker_info, mapping=info)
    assert sorted(forget_silent_workers(store, engine, now)) == ["gone@a", "junk@c", "stopped@d"]
    assert set(redis_client.hkeys(engine.workers)) == {"live@b"}
    assert set(redis_client.hkeys(engine.worker_info)) == {"live@b", "starting@e"}
    assert forget_silent_workers(store, engine, now) == []


def test_overview_says_which_workers_are_alive_by_the_gauges_rule(
    make_settings: Any, redis_client: Redis
) -> None:
    """The console marked a worker silent after 60 s while the ``agent_signal_workers`` gauge counted it for four
    reconcile intervals: one rule now, on the service's clock. A beat that is no number is listed, not alive (it
    made ``/v1/overview`` answer 500)."""
    from worker.core.clock import now_ms
    from worker.ops.state_metrics import live_workers
    from worker.store.events import EventStore

    settings = make_settings(reconcile_interval_s=30.0)  # four intervals: 120 s, past the console's old 60 s
    store = EventStore(redis_client, settings)
    now = now_ms()
    beats = {"fresh@a": now - 1000, "quiet@b": now - 90_000, "gone@c": now - 130_000, "junk@d": "not a time"}
    redis_client.hset(store.keys.workers, mapping=beats)
    with TestClient(create_web_app(settings)) as client:
        answer = client.get("/v1/overview")
    assert answer.status_code == 200, answer.text
    alive = {w["name"]: w["alive"] for w in answer.json()["workers"]}
    assert alive == {"fresh@a": True, "quiet@b": True, "gone@c": False, "junk@d": False}
    assert live_workers(store) == 2
