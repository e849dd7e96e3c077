"""A done event is stored leaner (issue 29), against a real Redis and a real worker: its body leaves its hash at
its commit (its chain holds the source and outlives the hash) and ``GET /v1/events/{id}`` reads it there; it is
in no status index (its source type's index lists it, the bucket's registry names that index), and the explorer
still finds it by status, unfiltered, behind a backlog of its type, through the done index written before the
change, and after ``agent-signal migrate runs`` names a type the registry lacked."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from producers.http.app import create_web_app
from tests.conftest import wait_for
from worker.documents.event_body import body_of
from worker.keys.layout import Keys
from worker.ops.runs import register_indexed_types

pytestmark = [pytest.mark.integration, pytest.mark.buckets]

SCOPE = "topic:lean"


def _events() -> list[dict[str, Any]]:
    return [
        {
            "sourceType": "test.timeline",
            "sourceId": "lean-1",
            "scopeKey": SCOPE,
            "userId": "lean-user",
            "agentId": "agent-1",
            "timestamp": 1_796_000_000_123,
            "payload": {"text": "déjà vu", "n": [1, 2.5, None], "nested": {"ok": True}},
        },
        {"sourceType": "test.flaky", "sourceId": "lean-2", "scopeKey": SCOPE, "payload": {}},  # dies
    ]


def _bodies(client: Redis, tenant: Keys, event_ids: list[str]) -> dict[str, dict[str, Any] | None]:
    """Each event's body as its hash holds it now (None: not there)."""
    out = {}
    for event_id in event_ids:
        raw = {str(k): str(v) for k, v in client.hgetall(tenant.for_scope(SCOPE).event(event_id)).items()}
        out[event_id] = body_of(raw, event_id)
    return out


def _settled(api: TestClient, event_id: str, state: str) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        record = api.get(f"/v1/events/{event_id}").json()
        return record if record["status"] == state else None

    return dict(wait_for(found, timeout_s=60, what=f"{event_id} {state}"))


def _listed(api: TestClient, **filters: Any) -> list[str]:
    answer = api.get("/v1/events", params={**filters, "limit": 200})
    assert answer.status_code == 200, answer.text
    return [e["eventId"] for e in answer.json()["events"]]


def test_a_done_events_body_moves_to_its_chain_and_reads_back_whole(
    make_settings: Any, start_worker: Any, redis_client: Redis, tenant_keys: Keys
) -> None:
    """Enqueued with no worker running, the bodies are read from the hashes; once run, the done event's hash has
    no body and its detail shows the same body; the dead one keeps its body in its hash (it can be redriven)."""
    settings = make_settings(max_attempts=1)
    with TestClient(create_web_app(settings)) as api:
        answer = api.post("/v1/events", json={"events": _events()})
        assert answer.status_code == 202, answer.text
        done, dead = (r["eventId"] for r in answer.json()["results"])
        before = _bodies(redis_client, tenant_keys, [done, dead])
        assert before[done] is not None and before[done]["payload"]["text"] == "déjà vu"
        start_worker(settings)
        record = _settled(api, done, "done")
        _settled(api, dead, "dead")
        after = _bodies(redis_client, tenant_keys, [done, dead])
        assert after[done] is None and after[dead] == before[dead]
        assert record["event"] == before[done]
        assert record["event"]["agentId"] == "agent-1" and record["event"]["eventId"] == done


def test_a_chain_kept_shorter_than_the_hash_keeps_the_body_in_the_hash(
    make_settings: Any, start_worker: Any, redis_client: Redis, tenant_keys: Keys
) -> None:
    """With chains retained for less than the dedupe window, the body would outlive its chain: it stays."""
    settings = make_settings(max_attempts=1, chain_retention_s=60, dedupe_window_s=3600)
    start_worker(settings)
    with TestClient(create_web_app(settings)) as api:
        answer = api.post("/v1/events", json={"events": _events()[:1]})
        (done,) = (r["eventId"] for r in answer.json()["results"])
        record = _settled(api, done, "done")
    assert _bodies(redis_client, tenant_keys, [done])[done] == record["event"]


def test_done_events_are_listed_through_the_type_indexes_and_the_done_index_of_before(
    make_settings: Any, start_worker: Any, redis_client: Redis, tenant_keys: Keys
) -> None:
    """The done event is in its type's index and no status index; status=done and an unfiltered walk find
    it, each once. A done event of a type the registry does not name (enqueued before the registry) is
    listed while the done index written before the change still holds it."""
    settings = make_settings(max_attempts=1)
    start_worker(settings)
    with TestClient(create_web_app(settings)) as api:
        answer = api.post("/v1/events", json={"events": _events()})
        done, dead = (r["eventId"] for r in answer.json()["results"])
        _settled(api, done, "done")
        _settled(api, dead, "dead")
        b = tenant_keys.for_scope(SCOPE)
        assert set(redis_client.zrange(b.runs("types"), 0, -1)) == {"test.timeline", "test.flaky"}
        assert redis_client.zscore(b.runs("type", "test.timeline"), done) is not None
        statuses = ("active", "done", "dead", "cancelled", "discarded")
        assert [s for s in statuses if redis_client.zscore(b.runs("status", s), done) is not None] == []
        assert _listed(api, status="done") == [done]
        assert sorted(_listed(api)) == sorted([done, dead])
        assert _listed(api, status="dead") == [dead]

        # as if admitted before the registry: not listed, until the old done index or the migration names it
        redis_client.zrem(b.runs("types"), "test.timeline")
        redis_client.persist(b.runs("types"))  # as if made by the migration alone: it must expire too
        assert _listed(api, status="done") == []
        redis_client.zadd(b.runs("status", "done"), {done: 1})  # the done index written before the change
        assert _listed(api, status="done") == [done]
        redis_client.delete(b.runs("status", "done"))
        assert _listed(api, status="done") == []
        assert register_indexed_types(redis_client, tenant_keys, ttl_s=60, dry_run=True) == 1
        assert _listed(api, status="done") == []
        assert register_indexed_types(redis_client, tenant_keys, ttl_s=60) == 1
        assert register_indexed_types(redis_client, tenant_keys, ttl_s=60) == 0  # idempotent
        assert 0 < redis_client.ttl(b.runs("types")) <= 60
        assert _listed(api, status="done") == [done]
        assert sorted(_listed(api)) == sorted([done, dead])

        # a type's last admission only moves forward (another process's clock behind never moves it back)
        later = int(redis_client.zscore(b.runs("types"), "test.timeline") or 0) + 3_600_000
        redis_client.zadd(b.runs("types"), {"test.timeline": later})
        event = {"sourceType": "test.timeline", "sourceId": "lean-3", "scopeKey": SCOPE, "payload": {}}
        assert api.post("/v1/events", json={"events": [event]}).status_code == 202
        assert redis_client.zscore(b.runs("types"), "test.timeline") == later


def test_a_backlog_of_one_type_does_not_push_its_finished_events_out(
    make_settings: Any, start_worker: Any, redis_client: Redis, tenant_keys: Keys
) -> None:
    """With three events kept per index, three done events of a type, then a backlog of five of that type in a
    paused scope: the type index keeps three besides the active ones, so the done events stay listed (by status,
    unfiltered, and in the overview's counts)."""
    settings = make_settings(max_attempts=1, run_index_max=3)
    start_worker(settings)
    with TestClient(create_web_app(settings)) as api:
        events = [
            {"sourceType": "test.timeline", "sourceId": f"kept-{i}", "scopeKey": SCOPE} for i in range(3)
        ]
        answer = api.post("/v1/events", json={"events": [{**e, "payload": {}} for e in events]})
        done = [r["eventId"] for r in answer.json()["results"]]
        for event_id in done:
            _settled(api, event_id, "done")
        backlog_scope = "topic:lean-backlog"
        assert api.post(f"/v1/scopes/{backlog_scope}/pause").status_code == 200
        backlog = [
            {
                "sourceType": "test.timeline",
                "sourceId": f"backlog-{i}",
                "scopeKey": backlog_scope,
                "payload": {},
            }
            for i in range(5)
        ]
        for event in backlog:  # one batch each: every admission trims the type index
            assert api.post("/v1/events", json={"events": [event]}).status_code == 202
        assert sorted(_listed(api, status="done")) == sorted(done)
        assert len(_listed(api, status="queued")) == 5
        assert len(_listed(api)) == 8
        counts = api.get("/v1/overview").json()["bySourceType"]["test.timeline"]
        assert (counts.get("done"), counts.get("queued")) == (3, 5), counts
