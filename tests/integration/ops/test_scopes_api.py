"""Scope control over HTTP, against a real Redis and a real worker: ``GET /v1/scopes``, pause and resume a
scope, cancel a queued event and a running one (it stops before its next action, with no partial commit)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from producers.http.app import create_web_app
from tests.conftest import wait_for
from worker.keys.layout import BucketKeys, Keys

pytestmark = [pytest.mark.integration, pytest.mark.buckets]


@pytest.fixture
def api(make_settings: Any, start_worker: Any) -> Iterator[TestClient]:
    settings = make_settings()
    start_worker(settings, concurrency=1)
    with TestClient(create_web_app(settings)) as client:
        yield client


def _send(client: TestClient, source_type: str, source_id: str, scope: str, **payload: Any) -> str:
    event = {"sourceType": source_type, "sourceId": source_id, "scopeKey": scope, "payload": payload}
    answer = client.post("/v1/events", json=event)
    assert answer.status_code == 202, answer.text
    return str(answer.json()["results"][0]["eventId"])


def _status(client: TestClient, event_id: str) -> dict[str, Any]:
    return dict(client.get(f"/v1/events/{event_id}").json())


def _until(client: TestClient, event_id: str, state: str) -> dict[str, Any]:
    return dict(
        wait_for(
            lambda: (s := _status(client, event_id))["status"] == state and s,
            timeout_s=60,
            what=f"{event_id} to be {state}",
        )
    )


def _scopes(client: TestClient, state: str) -> dict[str, dict[str, Any]]:
    answer = client.get("/v1/scopes", params={"state": state})
    assert answer.status_code == 200, answer.text
    return {s["scopeKey"]: s for s in answer.json()["scopes"]}


def _test_key(keys: BucketKeys, name: str) -> str:
    return f"{keys.bucket_prefix}test:{name}"


def test_a_paused_scope_holds_its_events_until_resumed(
    api: TestClient, redis_client: Redis, tenant_keys: Keys
) -> None:
    """Paused, a scope's event stays queued in its inbox while a later event of another scope finishes (one
    worker process: the order is the signal); resumed, it runs to done."""
    scope = "topic:held/with-slash"
    paused = api.post(f"/v1/scopes/{scope}/pause")
    assert paused.status_code == 200 and paused.json() == {"scopeKey": scope, "paused": True, "changed": True}
    held = _send(api, "test.timeline", "held-1", scope)
    later = _send(api, "test.timeline", "later-1", "topic:free")
    _until(api, later, "done")
    assert _status(api, held)["status"] == "queued"
    assert redis_client.lrange(tenant_keys.for_scope(scope).inbox(scope), 0, -1) == [held]
    listed = _scopes(api, "paused")[scope]
    assert listed["paused"] is True and listed["inboxDepth"] == 1 and listed["headAgeMs"] >= 0
    assert scope not in _scopes(api, "stuck") and scope not in _scopes(api, "waiting")
    # what KEDA scales on leaves the paused scope's event out (a deploy audit: a pause held workers up)
    backlog = api.get("/v1/backlog").json()
    assert (backlog["eventsWaiting"], backlog["eventsPaused"], backlog["eventsRunnable"]) == (1, 1, 0), (
        backlog
    )

    resumed = api.post(f"/v1/scopes/{scope}/resume")
    assert resumed.status_code == 200 and resumed.json()["changed"] is True
    record = _until(api, held, "done")
    assert [a["status"] for a in record["attemptsHistory"]] == ["succeeded"]
    assert scope not in _scopes(api, "paused")
    assert api.post("/v1/scopes/bad key/pause").json()["error"]["field"] == "scopeKey"


def test_a_cancelled_queued_event_never_runs(
    api: TestClient, redis_client: Redis, keys: BucketKeys, tenant_keys: Keys
) -> None:
    """Queued behind a running event of its scope, a cancelled event is skipped: the scope drains past it
    (its inbox empties) and its counter effect never happens."""
    scope = "topic:cancel-queued"
    blocker = _send(api, "test.two-step", "block-1", scope)
    wait_for(
        lambda: redis_client.exists(_test_key(keys, "two-step-started:block-1")), what="the blocker to run"
    )
    busy = _scopes(api, "busy")[scope]
    assert busy["leaseHolder"] and busy["inboxDepth"] == 1
    counter = _test_key(keys, "cancel-queued-counter")
    queued = _send(api, "test.counter", "queued-1", scope, counterKey=counter)
    answer = api.post(f"/v1/events/{queued}/cancel")
    assert answer.status_code == 200
    assert answer.json() == {"eventId": queued, "status": "cancelled", "cancelRequested": False}
    assert _status(api, queued)["status"] == "cancelled"

    redis_client.set(_test_key(keys, "two-step-go:block-1"), "1")
    _until(api, blocker, "done")
    inbox = tenant_keys.for_scope(scope).inbox(scope)
    wait_for(lambda: redis_client.llen(inbox) == 0, what="the scope to drain past it")
    record = _status(api, queued)
    assert record["status"] == "cancelled" and record["attempts"] == 0 and record["attemptsHistory"] == []
    assert redis_client.get(counter) is None
    assert api.post(f"/v1/events/{blocker}/cancel").status_code == 409  # done: nothing to cancel


def test_a_running_event_stops_before_its_next_action(
    api: TestClient, redis_client: Redis, keys: BucketKeys, tenant_keys: Keys
) -> None:
    """Cancelled while its first action runs: the first action's effect stays (it committed with its lane),
    the second action never runs, and the chain's staged write is not committed; the event is cancelled.
    The effects are read once no journal record waits: with scope buckets, a write to the tenant's home slot
    from a scope's bucket lands when the relay delivers it (worker/store/journal.py)."""
    running = _send(api, "test.two-step", "run-1", "topic:cancel-running")
    wait_for(lambda: redis_client.exists(_test_key(keys, "two-step-started:run-1")), what="the first action")
    answer = api.post(f"/v1/events/{running}/cancel")
    assert answer.status_code == 200
    assert answer.json() == {"eventId": running, "status": "processing", "cancelRequested": True}
    redis_client.set(_test_key(keys, "two-step-go:run-1"), "1")

    record = _until(api, running, "cancelled")
    assert [a["status"] for a in record["attemptsHistory"]] == ["cancelled"]
    every = tenant_keys.every_bucket()
    wait_for(
        lambda: not any(redis_client.zcard(k.journal_due) or redis_client.zcard(k.outbox_due) for k in every),
        what="every journaled write delivered",
    )
    assert redis_client.get(_test_key(keys, "two-step-first:run-1")) == "1"
    assert redis_client.get(_test_key(keys, "two-step-second:run-1")) is None
    assert redis_client.get(_test_key(keys, "two-step-chain:run-1")) is None
    listed = api.get("/v1/events", params={"status": "cancelled"}).json()["events"]
    assert [e["eventId"] for e in listed] == [running]


def test_a_cancel_during_the_last_action_leaves_the_event_done(
    api: TestClient, redis_client: Redis, keys: BucketKeys
) -> None:
    """Cancelled while its only action runs, an event has no next action to stop before: it ends ``done``, its
    chain and its source handler's staged write committed with the action's effect. An operator race walk found
    such an event ``cancelled`` with every action applied, no chain, and the staged write dropped."""
    running = _send(api, "test.two-step", "last-1", "topic:cancel-last", firstOnly=True)
    wait_for(lambda: redis_client.exists(_test_key(keys, "two-step-started:last-1")), what="the action")
    answer = api.post(f"/v1/events/{running}/cancel")
    assert answer.json() == {"eventId": running, "status": "processing", "cancelRequested": True}
    redis_client.set(_test_key(keys, "two-step-go:last-1"), "1")

    record = _until(api, running, "done")
    assert [a["status"] for a in record["attemptsHistory"]] == ["succeeded"]
    assert api.get(f"/v1/chains/{running}").status_code == 200
    for written in ("two-step-first:last-1", "two-step-chain:last-1"):  # journaled with scope buckets
        wait_for(lambda w=written: redis_client.get(_test_key(keys, w)) == "1", what=written)


def test_a_cancel_of_an_event_with_no_action_stops_it(
    api: TestClient, redis_client: Redis, keys: BucketKeys
) -> None:
    """Cancelled while its source handler runs, an event that dispatches no action is cancelled: nothing of its
    chain is committed (a review: the rule for an event in its last action let this one end done)."""
    running = _send(api, "test.two-step", "none-1", "topic:cancel-none", sourceOnly=True)
    wait_for(
        lambda: redis_client.exists(_test_key(keys, "two-step-started:none-1")), what="the source handler"
    )
    assert api.post(f"/v1/events/{running}/cancel").json()["cancelRequested"] is True
    redis_client.set(_test_key(keys, "two-step-go:none-1"), "1")
    _until(api, running, "cancelled")
    assert redis_client.get(_test_key(keys, "two-step-chain:none-1")) is None


def test_a_tenant_at_its_paused_scopes_limit_is_refused_one_more(make_settings: Any) -> None:
    """A pause mark has no TTL and any scope key may be paused, events or not: an audit wrote 50,000 marks and
    ``GET /v1/scopes?limit=1`` then took seconds, stalling the web process. Past the limit a pause is a 429
    naming scopeKey; pausing one already paused is still answered, and a resume makes room."""
    settings = make_settings(tenant_max_paused_scopes=3)
    with TestClient(create_web_app(settings)) as client:
        for i in range(3):
            assert client.post(f"/v1/scopes/topic:p{i}/pause").json()["changed"] is True
        over = client.post("/v1/scopes/topic:p3/pause")
        assert over.status_code == 429, over.text
        error = over.json()["error"]
        assert (error["code"], error["field"]) == ("quota_exceeded", "scopeKey")
        assert "AGENT_SIGNAL_TENANT_MAX_PAUSED_SCOPES" in error["message"]
        again = client.post("/v1/scopes/topic:p0/pause")
        assert again.status_code == 200 and again.json()["changed"] is False
        assert client.post("/v1/scopes/topic:p0/resume").json()["changed"] is True
        assert client.post("/v1/scopes/topic:p3/pause").json()["changed"] is True
        assert sorted(_scopes(client, "paused")) == ["topic:p1", "topic:p2", "topic:p3"]


def test_one_tenants_paused_inboxes_never_hide_anothers_runnable_events(
    make_settings: Any, redis_client: Redis
) -> None:
    """A review: an event cancelled in a paused scope leaves ``queued`` but stays in the inbox until a drain pops
    it, and a paused scope has no drain. Subtracted from the total, alpha's three such ids hid beta's three
    runnable events from KEDA (eventsRunnable 0). Now each tenant's paused count is at most its waiting count."""
    from producers import Producer
    from worker.ops.state_metrics import runnable_backlog

    producer = Producer(make_settings())
    store = producer.store
    redis_client.sadd(store.keys.tenants, "alpha", "beta")
    alpha = store.keys.for_tenant("alpha").for_scope("topic:p")
    redis_client.hset(alpha.runs("paused"), "topic:p", 1)
    redis_client.rpush(alpha.inbox("topic:p"), "evt_x", "evt_y", "evt_z")  # cancelled: queued counts none
    redis_client.hset(store.keys.for_tenant("beta").for_scope("topic:r").stats, "queued", 3)
    waiting, paused = runnable_backlog(store)
    assert (waiting["alpha"], paused["alpha"], waiting["beta"], paused["beta"]) == (0, 0, 3, 0)
    assert sum(waiting.values()) - sum(paused.values()) == 3
    redis_client.hset(alpha.stats, "queued", 2)  # two of them queued after all: counted as paused
    assert runnable_backlog(store)[1]["alpha"] == 2
    producer.close()


def test_a_queued_events_cancel_is_counted_once_by_the_door(api: TestClient) -> None:
    """``agent_signal_events_total{status="cancelled"}`` counted only the cancels a worker commits (a running
    event's): a queued event's never reaches a worker. The web process that cancels it counts it (origin door),
    once: a second cancel of the same event finds it cancelled already."""
    from tests.support.prom import parse, total

    def counted() -> float:
        samples = parse(api.get("/metrics").text)
        return total(samples, "agent_signal_events_total", status="cancelled", origin="door")

    scope = "topic:cancel-counted"
    assert api.post(f"/v1/scopes/{scope}/pause").status_code == 200  # its events stay queued
    queued = _send(api, "test.counter", "counted-1", scope, counterKey="unused")
    before = counted()
    for _ in range(2):
        assert api.post(f"/v1/events/{queued}/cancel").json()["status"] == "cancelled"
    assert counted() == before + 1
