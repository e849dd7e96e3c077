"""POST /v1/events and friends on a real Redis: status codes, error shapes, nothing enqueued on bad input."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from producers.http.app import create_web_app
from tests.support.prom import parse, total
from worker.keys.layout import BucketKeys

pytestmark = pytest.mark.integration

GOOD = {
    "sourceType": "agent.user.message",
    "sourceId": "msg_u1",
    "payload": {"topicId": "tpc_1", "message": "hi"},
}


@pytest.fixture
def client(make_settings: Any) -> Iterator[TestClient]:
    with TestClient(create_web_app(make_settings(max_event_bytes=1024, max_request_bytes=64 * 1024))) as c:
        yield c


def _stored(redis_client: Redis, keys: BucketKeys) -> list[str]:
    return [
        k
        for k in redis_client.scan_iter(match=f"{keys.prefix}*")
        if ":broker:" not in k and not k.endswith("-secret") and not k.endswith("stats")
    ]


class TestPostEvents:
    def test_accepts_one_event_then_answers_duplicate(self, client: TestClient) -> None:
        """A new event is accepted (202) with its ids; the same event again is a duplicate with the same id."""
        first = client.post("/v1/events", json=GOOD)
        assert first.status_code == 202
        (result,) = first.json()["results"]
        assert result["status"] == "accepted" and result["sourceId"] == "msg_u1"
        assert result["eventId"].startswith("evt_")
        second = client.post("/v1/events", json={**GOOD, "timestamp": 5})
        assert second.json()["results"] == [{**result, "status": "duplicate"}]
        status = client.get(f"/v1/events/{result['eventId']}").json()
        assert (
            status["status"] == "queued" and status["attempts"] == 0 and status["chainId"] == "chain:msg_u1"
        )
        assert status["scopeKey"] == "topic:tpc_1"

    def test_batch(self, client: TestClient) -> None:
        """A batch answers one result per event, in order."""
        events = [{**GOOD, "sourceId": f"m{i}"} for i in range(3)] + [GOOD | {"sourceId": "m0"}]
        body = client.post("/v1/events", json={"events": events}).json()
        assert [r["status"] for r in body["results"]] == ["accepted", "accepted", "accepted", "duplicate"]

    @pytest.mark.parametrize(
        ("body", "code", "field", "message_part"),
        [
            (
                {k: v for k, v in GOOD.items() if k != "sourceId"},
                "missing_field",
                "sourceId",
                "sourceId is required",
            ),
            ({**GOOD, "sourceId": 42}, "invalid_field", "sourceId", "string"),
            ({**GOOD, "payload": "text"}, "invalid_type", "payload", "payload must be a JSON object"),
            ({**GOOD, "timestamp": "yesterday"}, "invalid_field", "timestamp", "integer"),
            ({**GOOD, "timestamp": -1}, "invalid_field", "timestamp", "greater than or equal to 0"),
            (
                {**GOOD, "sourceType": "agent.unknown"},
                "unknown_source_type",
                "sourceType",
                "unknown source type",
            ),
            ({**GOOD, "sorceId": "x"}, "unknown_field", "sorceId", "not a SourceEvent field"),
            ([1, 2], "invalid_type", None, "JSON object"),
        ],
    )
    def test_invalid_event_names_the_field_and_stores_nothing(
        self,
        client: TestClient,
        redis_client: Redis,
        keys: BucketKeys,
        body: Any,
        code: str,
        field: str | None,
        message_part: str,
    ) -> None:
        """Each kind of bad event gets 422 with code, message and field, and nothing reaches Redis."""
        response = client.post("/v1/events", json=body)
        assert response.status_code == 422
        error = response.json()["error"]
        assert error["code"] == code
        assert error.get("field") == field
        assert message_part in error["message"]
        assert _stored(redis_client, keys) == []

    def test_malformed_json(self, client: TestClient, redis_client: Redis, keys: BucketKeys) -> None:
        """A body that is not JSON gets 422 invalid_json, not a stack trace."""
        response = client.post(
            "/v1/events", content=b'{"sourceType": ', headers={"content-type": "application/json"}
        )
        assert response.status_code == 422
        assert response.json()["error"]["code"] == "invalid_json"
        assert "Traceback" not in response.text
        assert _stored(redis_client, keys) == []
        assert int(redis_client.hget(keys.stats, "rejected") or 0) == 1  # counted, its events unknown: one

    def test_batch_with_one_invalid_event_enqueues_nothing(
        self, client: TestClient, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """The error names events[i] and none of the valid events is stored."""
        events = [GOOD, {**GOOD, "sourceId": "ok2"}, {**GOOD, "sourceId": ""}]
        response = client.post("/v1/events", json={"events": events})
        assert response.status_code == 422
        assert response.json()["error"]["field"] == "events[2].sourceId"
        assert _stored(redis_client, keys) == []
        # all or nothing: the three are rejected, as the CLI's door counts a refused batch
        assert int(redis_client.hget(keys.stats, "rejected") or 0) == 3

    def test_oversize_payload_is_413(self, client: TestClient, redis_client: Redis, keys: BucketKeys) -> None:
        """A payload over max_event_bytes gets 413 naming the payload; a body over max_request_bytes, 413 too."""
        big = {**GOOD, "payload": {"message": "x" * 2000}}
        response = client.post("/v1/events", json=big)
        assert response.status_code == 413
        assert response.json()["error"] == {
            "code": "payload_too_large",
            "message": "payload is 2014 bytes; the limit is 1024",  # {"message":"x…"}
            "field": "payload",
        }
        huge = json.dumps({"events": [GOOD] * 2000})
        response = client.post("/v1/events", content=huge, headers={"content-type": "application/json"})
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "request_too_large"
        assert _stored(redis_client, keys) == []
        # the payload's event; the body over the request limit is refused by the door before any route runs
        assert int(redis_client.hget(keys.stats, "rejected") or 0) == 1

    def test_unknown_event_is_404(self, client: TestClient) -> None:
        """GET of an unknown event id is a JSON 404."""
        response = client.get("/v1/events/evt_nope")
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"


class TestAuth:
    def test_token_required_when_set(self, make_settings: Any) -> None:
        """With AGENT_SIGNAL_API_TOKEN set, /v1 needs the bearer token; /healthz does not."""
        with TestClient(create_web_app(make_settings(api_token="s3cret"))) as c:
            assert c.post("/v1/events", json=GOOD).status_code == 401
            assert (
                c.post("/v1/events", json=GOOD, headers={"Authorization": "Bearer wrong"}).status_code == 401
            )
            assert (
                c.post("/v1/events", json=GOOD, headers={"Authorization": "Bearer s3cret"}).status_code == 202
            )
            assert c.get("/healthz").status_code == 200


class TestReadiness:
    def test_ready_and_metrics(self, client: TestClient) -> None:
        """/readyz checks Redis and the broker; /metrics is this process's Prometheus text with the door's
        counters (the process's counters outlive one test: compared before and after); /metrics/state and
        /v1/backlog say one event waits."""
        assert client.get("/readyz").json() == {"ready": True, "checks": {"redis": "ok", "broker": "ok"}}

        def counts() -> tuple[float, float]:
            samples = parse(client.get("/metrics").text)
            return tuple(  # type: ignore[return-value]
                total(samples, "agent_signal_events_total", tenant="default", status=s)
                for s in ("accepted", "duplicate")
            )

        accepted, duplicate = counts()
        client.post("/v1/events", json=GOOD)
        client.post("/v1/events", json=GOOD)
        assert counts() == (accepted + 1, duplicate + 1)
        state = parse(client.get("/metrics/state").text)
        assert total(state, "agent_signal_backlog_events", tenant="default") == 1
        assert client.get("/v1/backlog").json() == {
            "eventsWaiting": 1,
            "byTenant": {"default": 1},
            "eventsPaused": 0,
            "eventsRunnable": 1,
        }
