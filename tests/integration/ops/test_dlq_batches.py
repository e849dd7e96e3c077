"""One redrive or discard request acts on at most ``AGENT_SIGNAL_DLQ_BATCH_MAX`` dead events
(producers/http/routes/ops.py): ``{"all": true}`` over a DLQ of hundreds of thousands ran one request for minutes,
holding a thread of the shared web process, and ``eventIds`` took as many ids as 8 MB of JSON holds. Now ``all``
takes the longest dead first and answers ``"more": true`` until none remain; a longer list is a 413 naming it.
Real Redis, the real web app, dead events made by a real drain; the batch made 2 so five events take three calls."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
from fastapi.testclient import TestClient

import worker.store.events as store_events
from producers import Producer
from producers.http.app import create_web_app
from tests.support.drains import dead_by_drain
from worker.core.clock import now_ms
from worker.runtime.app import build_pipeline
from worker.telemetry.recorder import DISABLED

pytestmark = [pytest.mark.integration, pytest.mark.buckets]


@pytest.fixture
def dead_and_api(make_settings: Any) -> Iterator[tuple[list[str], TestClient]]:
    settings = make_settings(max_attempts=1, dlq_batch_max=2)
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=DISABLED, app=producer.app)
    dead = dead_by_drain(producer, pipeline, "dlq-batch", 5)
    assert all(producer.status(e)["status"] == "dead" for e in dead)  # type: ignore[index]
    with TestClient(create_web_app(settings)) as client:
        yield dead, client
    producer.close()
    pipeline.store.client.close()


def _dead(client: TestClient) -> list[str]:
    return [e["eventId"] for e in client.get("/v1/dlq", params={"limit": 100}).json()["events"]]


def test_all_goes_a_batch_at_a_time_longest_dead_first_and_says_more(
    dead_and_api: tuple[list[str], TestClient],
) -> None:
    dead, client = dead_and_api
    answers = []
    while True:
        answer = client.post("/v1/dlq/discard", json={"all": True, "reason": "batched"})
        assert answer.status_code == 200, answer.text
        answers.append(answer.json())
        if not answer.json().get("more"):
            break
    assert [a["discarded"] for a in answers] == [dead[0:2], dead[2:4], dead[4:]]  # the order they died in
    assert [a.get("more") for a in answers] == [True, True, None]  # absent once the DLQ fit
    assert _dead(client) == []


def test_redrive_all_stops_at_the_batch_and_the_rest_stays_dead(
    dead_and_api: tuple[list[str], TestClient],
) -> None:
    dead, client = dead_and_api
    answer = client.post("/v1/dlq/redrive", json={"all": True})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["redriven"], body["notDead"], body["more"]) == (dead[:2], [], True)
    assert isinstance(body["until"], int)
    assert sorted(_dead(client)) == sorted(dead[2:])


def test_a_sweep_ends_at_the_events_dead_when_it_began(
    make_settings: Any, dead_and_api: tuple[list[str], TestClient]
) -> None:
    """A review found "redrive all" going round for ever while events kept failing: each one redriven died again,
    re-entered the DLQ and kept ``more`` true (one sweep redrove three poison events 5, 6 and 5 times). The
    answer's ``until``, sent back, takes only the events dead when the sweep began."""
    dead, client = dead_and_api
    settings = make_settings(max_attempts=1, dlq_batch_max=2)
    pipeline = build_pipeline(settings, telemetry=DISABLED)
    first = client.post("/v1/dlq/redrive", json={"all": True}).json()
    assert first["redriven"] == dead[:2] and first["more"] is True
    for i in range(2):  # a worker runs them meanwhile: they die again, after the sweep began
        pipeline.drain_scope(f"topic:dlq-batch-{i}")
    assert sorted(_dead(client)) == sorted(dead)
    rest = [client.post("/v1/dlq/redrive", json={"all": True, "until": first["until"]}).json()]
    while rest[-1].get("more"):
        rest.append(client.post("/v1/dlq/redrive", json={"all": True, "until": rest[-1]["until"]}).json())
    redriven = [event_id for r in rest for event_id in r["redriven"]]
    assert sorted(redriven) == sorted(dead[2:]) and len(rest) == 2  # each event once in the whole sweep
    for bad in (
        {"all": True, "until": -1},
        {"all": True, "until": "soon"},
        {"eventIds": [dead[0]], "until": 1},
    ):
        refused = client.post("/v1/dlq/discard", json=bad)
        assert refused.status_code == 422 and refused.json()["error"]["field"] == "until", refused.text
    pipeline.store.client.close()


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/dlq/redrive", {"eventIds": ["a", "b", "c"]}, "eventIds"),
        ("/v1/dlq/discard", {"eventIds": ["a", "b", "c"]}, "eventIds"),
        ("/v1/dlq/redrive", {"events": [{"eventId": x, "payload": {}} for x in "abc"]}, "events"),
    ],
)
def test_a_longer_list_is_refused_naming_it_and_nothing_is_touched(
    dead_and_api: tuple[list[str], TestClient], path: str, body: dict[str, Any], field: str
) -> None:
    dead, client = dead_and_api
    if "eventIds" in body:
        body = {"eventIds": dead[:3]}
    answer = client.post(path, json=body)
    assert answer.status_code == 413, answer.text
    error = answer.json()["error"]
    assert error["code"] == "batch_too_large" and error["field"] == field
    assert "at most 2" in error["message"]
    assert sorted(_dead(client)) == sorted(dead)
    assert client.post(path, json={"eventIds": dead[:2]}).status_code == 200  # the limit itself is taken


def test_a_sweep_takes_an_event_killed_by_a_worker_whose_clock_runs_ahead(make_settings: Any) -> None:
    """A second review found the sweep's ``until`` taken from the web process's clock and compared with deaths
    dated by each worker's: an event killed by a worker an hour ahead was left out of "redrive all", which said
    it was done. A death is now dated by Redis's clock, and a sweep begins at it."""
    settings = make_settings(max_attempts=1)
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=DISABLED, app=producer.app)
    sent = {"sourceType": "test.flaky", "sourceId": "ahead", "scopeKey": "topic:ahead", "payload": {}}
    event_id = producer.enqueue(sent).event_id
    with mock.patch.object(store_events, "now_ms", lambda: now_ms() + 3_600_000):
        assert pipeline.drain_scope("topic:ahead").next == "idle"
    record = producer.status(event_id)
    assert record is not None and record["status"] == "dead"
    # its last attempt ends when it died, on the same clock (a third review found them an hour apart)
    assert record["attemptsHistory"][-1]["finishedAt"] == record["deadAt"]
    with TestClient(create_web_app(settings)) as client:
        answer = client.post("/v1/dlq/redrive", json={"all": True, "until": None})
        assert answer.status_code == 200 and answer.json() == {"redriven": [event_id], "notDead": []}, (
            answer.text
        )
    producer.close()
    pipeline.store.client.close()


def test_a_stale_entry_is_dropped_so_a_sweep_goes_on_past_it(
    dead_and_api: tuple[list[str], TestClient], tenant_keys: Any, redis_client: Any
) -> None:
    """An audit of the TypeScript client's sweep found the server could answer ``more`` for ever: a DLQ entry
    whose event is not dead (its record gone) was answered ``notDead`` and left in the DLQ, so each request of an
    "all" sweep met the same entries again, and with a batch of them it acted on none. Now redrive and discard
    drop such an entry, and the sweep's next request goes on past it."""
    dead, client = dead_and_api
    for i in (0, 1):  # the two longest dead lose their records: a whole batch of stale entries
        redis_client.delete(tenant_keys.for_scope(f"topic:dlq-batch-{i}").event(dead[i]))
    first = client.post("/v1/dlq/redrive", json={"all": True}).json()
    assert (first["redriven"], sorted(first["notDead"]), first["more"]) == ([], sorted(dead[:2]), True)
    assert sorted(_dead(client)) == sorted(dead[2:])  # the stale entries are gone, from the dead index too
    for i in (0, 1):  # the dead index is never trimmed: a stale id would stay in it for good
        assert (
            redis_client.zscore(tenant_keys.for_scope(f"topic:dlq-batch-{i}").runs("status", "dead"), dead[i])
            is None
        )
    second = client.post("/v1/dlq/discard", json={"all": True, "until": first["until"]}).json()
    assert sorted(second["discarded"]) == sorted(dead[2:4]), second  # two may share a death's millisecond
    stale = tenant_keys.for_scope("topic:dlq-batch-4")
    redis_client.delete(stale.event(dead[4]))
    last = client.post("/v1/dlq/discard", json={"all": True, "until": first["until"]}).json()
    assert (last["discarded"], last["notDead"], last.get("more")) == ([], [dead[4]], None)
    assert _dead(client) == []


def test_a_source_id_names_its_dead_event_and_a_bad_id_is_refused(
    dead_and_api: tuple[list[str], TestClient],
) -> None:
    """A contract audit: a dead event given by its source id (which ``GET /v1/events/{id}`` accepts) was
    answered ``notDead``, and so was an id no event can have. A source id now names its one dead event (an
    edit's too), an id breaking the id rule is a 422 naming its place, and an unknown one is still notDead."""
    dead, client = dead_and_api
    answer = client.post("/v1/dlq/discard", json={"eventIds": ["dlq-batch-0", "no-such-source"]})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"discarded": [dead[0]], "notDead": ["no-such-source"]}
    edit = client.post("/v1/dlq/redrive", json={"events": [{"eventId": "dlq-batch-1", "payload": {"n": 1}}]})
    assert edit.status_code == 200 and edit.json()["redriven"] == [dead[1]], edit.text
    stored = client.get(f"/v1/events/{dead[1]}").json()
    assert stored["event"]["payload"] == {"n": 1}  # the edit was kept, not the redrive done without it
    bad = client.post("/v1/dlq/redrive", json={"eventIds": [dead[2], "a b"]})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "eventIds[1]", bad.text
    assert sorted(_dead(client)) == sorted(dead[2:])  # nothing was redriven by the refused request


def test_each_event_that_goes_dead_says_so_in_one_warning_without_its_error_text(
    caplog: pytest.LogCaptureFixture, dead_and_api: tuple[list[str], TestClient]
) -> None:
    """A deploy audit: events went dead with no warning or error line at all (only the DLQ and metrics said so).
    Each now logs one warning naming its id and its error's kind, not the error's text (it may quote the
    event: ``flaky handler is broken`` here)."""
    dead, _ = dead_and_api
    said = [r for r in caplog.get_records("setup") if r.getMessage().startswith("event dead-lettered")]
    assert [getattr(r, "eventId", None) for r in said] == dead
    assert all(r.levelname == "WARNING" and "broken" not in r.getMessage() for r in said)
