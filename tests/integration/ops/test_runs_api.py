"""The runs explorer and the dead-letter workbench over HTTP, against a real Redis and a real worker:
``GET /v1/events`` (filters, cursor pages), ``GET /v1/events/{id}`` (attempts history, source ids),
``POST /v1/dlq/discard`` and ``GET /v1/dlq?state=discarded``, ``POST /v1/dlq/redrive`` with an edited payload,
and the payload schemas checked at the door."""

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
    settings = make_settings(max_attempts=1)
    start_worker(settings, concurrency=2)
    with TestClient(create_web_app(settings)) as client:
        yield client


def _event(source_type: str, source_id: str, scope: str, **payload: Any) -> dict[str, Any]:
    return {"sourceType": source_type, "sourceId": source_id, "scopeKey": scope, "payload": payload}


def _send(client: TestClient, *events: dict[str, Any]) -> list[str]:
    answer = client.post("/v1/events", json={"events": list(events)})
    assert answer.status_code == 202, answer.text
    return [r["eventId"] for r in answer.json()["results"]]


def _status(client: TestClient, event_id: str) -> dict[str, Any]:
    answer = client.get(f"/v1/events/{event_id}")
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def _final(client: TestClient, event_id: str, *states: str) -> dict[str, Any]:
    return dict(
        wait_for(
            lambda: (s := _status(client, event_id))["status"] in states and s,
            timeout_s=60,
            what=f"{event_id} to be {'|'.join(states)}",
        )
    )


def _walk(client: TestClient, limit: int, **filters: Any) -> list[dict[str, Any]]:
    """Every page of a listing, following cursors; each page at most ``limit`` events."""
    out: list[dict[str, Any]] = []
    params: dict[str, Any] = {**filters, "limit": limit}
    for _ in range(100):
        page = client.get("/v1/events", params=params)
        assert page.status_code == 200, page.text
        body = page.json()
        assert len(body["events"]) <= limit
        out += body["events"]
        if "cursor" not in body:
            return out
        params["cursor"] = body["cursor"]
    raise AssertionError("the cursor never ended")


def test_filters_and_cursor_pages_over_250_events(
    api: TestClient, redis_client: Redis, tenant_keys: Keys
) -> None:
    """250 events in 5 batches over 2 scopes, 2 source types and 2 users: every filter (and a combination)
    pages, 37 at a time, to exactly the matching events in (enqueuedAt, eventId) descending order."""
    for batch in range(5):
        events = []
        for i in range(50):
            n = batch * 50 + i
            kind = "test.flaky" if n % 5 == 0 else "test.timeline"  # flaky dies (max_attempts=1)
            event = _event(kind, f"run-{n:03d}", f"topic:runs-{n % 2}", seq=n)
            event["userId"] = f"runs-user-{n % 3 == 0}"
            events.append(event)
        _send(api, *events)

    def queued() -> int:
        return sum(int(redis_client.hget(k.stats, "queued") or 0) for k in tenant_keys.every_bucket())

    wait_for(lambda: queued() == 0, timeout_s=90, what="all settled")

    everything = _walk(api, 37)
    assert len(everything) == 250 and len({e["eventId"] for e in everything}) == 250
    assert everything == sorted(everything, key=lambda e: (e["enqueuedAt"], e["eventId"]), reverse=True)
    assert {e["status"] for e in everything} == {"done", "dead"}
    # the unfiltered walk merged the status indexes: no index of all events is kept (issue 29)
    assert not any(redis_client.exists(k.runs("all")) for k in tenant_keys.every_bucket())
    assert all(e["finishedAt"] >= e["enqueuedAt"] and e["sourceId"].startswith("run-") for e in everything)
    middle = everything[120]["enqueuedAt"]
    cases: list[dict[str, Any]] = [
        {"status": "dead"},
        {"status": "done"},
        {"sourceType": "test.flaky"},
        {"scopeKey": "topic:runs-1"},
        {"userId": "runs-user-True"},
        {"since": middle},
        {"until": middle},
        {"scopeKey": "topic:runs-0", "userId": "runs-user-False", "status": "done"},
        {"sourceType": "test.timeline", "since": middle, "status": "done"},
    ]
    names = {"status": "status", "sourceType": "sourceType", "scopeKey": "scopeKey", "userId": "userId"}
    for filters in cases:

        def wanted(e: dict[str, Any], f: dict[str, Any] = filters) -> bool:
            exact = all(e[names[k]] == v for k, v in f.items() if k in names)
            return exact and e["enqueuedAt"] >= f.get("since", 0) and e["enqueuedAt"] <= f.get("until", 2**62)

        expected = [e["eventId"] for e in everything if wanted(e)]
        assert expected, filters
        assert [e["eventId"] for e in _walk(api, 37, **filters)] == expected, filters
    assert len(_walk(api, 200, status="dead")) == 50

    bad = api.get("/v1/events", params={"cursor": "not-a-cursor"})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "cursor"
    for limit in (0, 201):
        bad = api.get("/v1/events", params={"limit": limit})
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "limit"


def test_attempts_history_of_an_event_that_failed_twice_then_succeeded(
    make_settings: Any, start_worker: Any
) -> None:
    """Each attempt has its start, end, status and error: failed, failed, succeeded, in order."""
    settings = make_settings(max_attempts=3)
    start_worker(settings)
    with TestClient(create_web_app(settings)) as client:
        (event_id,) = _send(client, _event("test.flaky", "flaky-twice", "topic:flaky", failTimes=2))
        record = _final(client, event_id, "done", "dead")
    assert record["status"] == "done" and record["attempts"] == 3
    history = record["attemptsHistory"]
    assert [(a["attempt"], a["status"]) for a in history] == [(1, "failed"), (2, "failed"), (3, "succeeded")]
    assert all("flaky handler is broken" in a["error"] for a in history[:2]) and "error" not in history[2]
    times = [t for a in history for t in (a["startedAt"], a["finishedAt"])]
    assert times == sorted(times) and history[-1]["finishedAt"] == record["finishedAt"]


def test_a_source_id_finds_its_event_unless_ambiguous(api: TestClient) -> None:
    """A source id answers its one event; the same source id in two scopes is a 409 naming both; unknown: 404."""
    (first,) = _send(api, _event("test.timeline", "lookup-1", "topic:lookup-a"))
    found = api.get("/v1/events/lookup-1")
    assert found.status_code == 200 and found.json()["eventId"] == first
    (second,) = _send(api, _event("test.timeline", "lookup-1", "topic:lookup-b"))
    ambiguous = api.get("/v1/events/lookup-1")
    assert ambiguous.status_code == 409 and ambiguous.json()["error"]["code"] == "ambiguous_source_id"
    assert {c["eventId"] for c in ambiguous.json()["candidates"]} == {first, second}
    assert first in ambiguous.json()["error"]["message"] and second in ambiguous.json()["error"]["message"]
    assert api.get("/v1/events/lookup-nobody").status_code == 404


def test_a_source_id_holding_slashes_is_looked_up_raw_or_encoded(api: TestClient) -> None:
    """Issue 28: a source id with ``/`` was accepted but its lookup answered 404. Raw or percent-encoded (as
    the TypeScript client sends it), it finds its event; ``…/cancel`` below it still reaches the cancel route."""
    source_id = "repo/a/b/cancel"  # even a last segment named like the route below an event
    (event_id,) = _send(api, _event("test.timeline", source_id, "topic:slashes"))
    for path in (f"/v1/events/{source_id}", "/v1/events/repo%2Fa%2Fb%2Fcancel"):
        found = api.get(path)
        assert found.status_code == 200 and found.json()["eventId"] == event_id, (path, found.text)
        assert found.json()["sourceId"] == source_id
    _final(api, event_id, "done")
    for path in (f"/v1/events/{source_id}/cancel", "/v1/events/repo%2Fa%2Fb%2Fcancel/cancel"):
        refused = api.post(path)  # routed to cancel, with the whole source id: a done event cannot cancel
        assert refused.status_code == 409, (path, refused.text)
        assert refused.json()["error"]["code"] == "not_cancellable" and event_id in refused.text
    assert api.get("/v1/events/repo/a/nobody").status_code == 404


def test_discard_keeps_an_audit_record_listed_as_discarded(
    api: TestClient, redis_client: Redis, tenant_keys: Keys
) -> None:
    """Discarded dead events leave the DLQ, keep status, reason and time, and are listed by state=discarded;
    the audit trail names the event, the actor (no credential configured: ``local``) and the time only."""
    dead = _send(api, *(_event("test.flaky", f"discard-{i}", "topic:discard") for i in range(2)))
    for event_id in dead:
        _final(api, event_id, "dead")
    answer = api.post("/v1/dlq/discard", json={"eventIds": [dead[0], "evt_nope"], "reason": "bad data"})
    assert answer.status_code == 200 and answer.json() == {"discarded": [dead[0]], "notDead": ["evt_nope"]}
    assert [e["eventId"] for e in api.get("/v1/dlq").json()["events"]] == [dead[1]]
    (listed,) = api.get("/v1/dlq", params={"state": "discarded"}).json()["events"]
    assert listed["eventId"] == dead[0] and listed["reason"] == "bad data" and listed["at"] > 0
    assert listed["status"] == "discarded" and listed["event"]["sourceId"] == "discard-0"
    record = _status(api, dead[0])
    assert record["status"] == "discarded" and record["discardReason"] == "bad data"
    assert [e["eventId"] for e in api.get("/v1/events", params={"status": "discarded"}).json()["events"]] == [
        dead[0]
    ]
    trail = tenant_keys.for_scope(
        "topic:discard"
    ).bucket_audit  # a discard's script runs in the scope's bucket
    audit = [fields for _, fields in redis_client.xrange(trail) if fields.get("action") == "discard"]
    # the reason stays on the event (erasure reaches it there), never in the append-only audit trail
    assert audit == [{"action": "discard", "actor": "local", "eventId": dead[0], "at": str(listed["at"])}]
    assert api.post("/v1/dlq/discard", json={"all": True}).json() == {"discarded": [dead[1]], "notDead": []}
    assert api.get("/v1/dlq").json()["total"] == 0
    assert api.post("/v1/dlq/redrive", json={"eventIds": [dead[0]]}).json()["notDead"] == [dead[0]]


def test_a_redrive_with_an_edited_payload_reaches_done(api: TestClient) -> None:
    """An event whose payload makes its handler fail dies; an edit its plugin's payload schema refuses is a 422
    naming the field and changes nothing; a valid edit replaces the stored payload (same id) and the redrive
    finishes it."""
    (event_id,) = _send(api, _event("test.flaky", "edit-1", "topic:edit", failTimes=1000))
    dead = _final(api, event_id, "dead")
    assert "flaky handler is broken" in dead["error"]

    bad_edit = {"events": [{"eventId": event_id, "payload": {"failTimes": "never"}}]}
    invalid = api.post("/v1/dlq/redrive", json=bad_edit)
    assert invalid.status_code == 422 and invalid.json()["error"]["field"] == "events[0].payload.failTimes"
    assert _status(api, event_id)["status"] == "dead"

    edited = {"failTimes": 0, "note": "fixed in the workbench"}
    answer = api.post("/v1/dlq/redrive", json={"events": [{"eventId": event_id, "payload": edited}]})
    assert answer.status_code == 200 and answer.json() == {"redriven": [event_id], "notDead": []}
    record = _final(api, event_id, "done", "dead")
    assert record["status"] == "done" and record["eventId"] == event_id and record["editedAt"] > 0
    runs = [(a["run"], a["status"]) for a in record["attemptsHistory"]]
    assert runs == [(0, "failed"), (1, "succeeded")]
    assert record["event"]["payload"] == edited and record["event"]["sourceId"] == "edit-1"


def test_a_redrive_that_succeeds_clears_the_current_error(
    api: TestClient, redis_client: Redis, keys: BucketKeys
) -> None:
    """Issue 28: a run that succeeded after a redrive showed its old error as current. Through a real worker:
    the event dies with its error, its cause is fixed, the redrive succeeds; its run has no current error and
    its attempts history keeps the old one."""
    (event_id,) = _send(api, _event("test.flaky", "cleared-1", "topic:cleared", errorText="cause-1"))
    dead = _final(api, event_id, "dead")
    assert "flaky handler is broken" in dead["error"]
    redis_client.set(f"{keys.bucket_prefix}test:fixed", "1")
    answer = api.post("/v1/dlq/redrive", json={"eventIds": [event_id]})
    assert answer.status_code == 200 and answer.json()["redriven"] == [event_id], answer.text
    record = _final(api, event_id, "done", "dead")
    assert record["status"] == "done" and "error" not in record, record
    history = record["attemptsHistory"]
    assert [(a["run"], a["status"]) for a in history] == [(0, "failed"), (1, "succeeded")]
    assert history[0]["error"] == dead["error"] and "error" not in history[1]
    listed = api.get("/v1/events", params={"scopeKey": "topic:cleared"}).json()["events"]
    assert [(e["eventId"], "error" in e) for e in listed] == [(event_id, False)]


def test_a_tool_outcome_without_outcome_is_refused_at_the_door(api: TestClient) -> None:
    """The activity plugin's payload schema: 422 naming payload.outcome (events[i]. in a batch), nothing
    stored; an outcome without a status is refused too; the same event with a whole outcome is accepted."""
    tool = {"identifier": "x"}
    bad = _event("tool.outcome.failed", "door-1", "topic:door", tool=tool)
    single = api.post("/v1/events", json=bad)
    assert single.status_code == 422 and single.json()["error"]["field"] == "payload.outcome"
    good = _event(
        "tool.outcome.completed", "door-2", "topic:door", tool=tool, outcome={"status": "succeeded"}
    )
    batch = api.post("/v1/events", json={"events": [good, bad]})
    assert batch.status_code == 422 and batch.json()["error"]["field"] == "events[1].payload.outcome"
    assert api.get("/v1/events", params={"scopeKey": "topic:door"}).json()["events"] == []
    empty = api.post("/v1/events", json={**bad, "payload": {"tool": tool, "outcome": {}}})
    assert empty.status_code == 422 and empty.json()["error"]["field"] == "payload.outcome.status"
    whole = {"tool": tool, "outcome": {"status": "failed"}}
    assert api.post("/v1/events", json={**bad, "payload": whole}).status_code == 202


def test_dlq_bodies_name_an_unknown_key_or_two_targets_and_touch_nothing(api: TestClient) -> None:
    """``{"eventIds": [x], "all": true}`` acted on every dead event (its ids unread), and a misspelt ``reason``
    was dropped: both are 422s naming the key now, and the dead event stays dead; a batch's unknown key too."""
    (dead,) = _send(api, _event("test.flaky", "strict-1", "topic:strict"))
    _final(api, dead, "dead")
    for path, body, field in (
        ("/v1/dlq/redrive", {"eventIds": ["evt_nope"], "all": True}, "all"),
        ("/v1/dlq/discard", {"eventIds": ["evt_nope"], "all": True}, "all"),
        ("/v1/dlq/redrive", {"eventIds": [dead], "events": [{"eventId": dead, "payload": {}}]}, "events"),
        ("/v1/dlq/discard", {"eventIds": [dead], "reasn": "typo"}, "reasn"),
        ("/v1/dlq/redrive", {"all": True, "reason": "redrive takes none"}, "reason"),
    ):
        answer = api.post(path, json=body)
        assert answer.status_code == 422, (path, body, answer.text)
        assert answer.json()["error"]["field"] == field, answer.text
    assert _status(api, dead)["status"] == "dead"
    assert [e["eventId"] for e in api.get("/v1/dlq").json()["events"]] == [dead]
    # "all": false names no target: the ids are read, and nothing else is touched
    unknown = api.post("/v1/dlq/redrive", json={"eventIds": ["evt_nope"], "all": False})
    assert unknown.status_code == 200 and unknown.json() == {"redriven": [], "notDead": ["evt_nope"]}, (
        unknown.text
    )
    assert _status(api, dead)["status"] == "dead"
    batch = api.post(
        "/v1/events", json={"events": [_event("test.flaky", "strict-2", "topic:strict")], "tenant": "x"}
    )
    assert batch.status_code == 422 and batch.json()["error"] == {
        "code": "unknown_field",
        "message": "tenant is not a field of a batch (its one field: events)",
        "field": "tenant",
    }
    listed = api.get("/v1/events", params={"scopeKey": "topic:strict"}).json()["events"]
    assert [e["eventId"] for e in listed] == [dead]
