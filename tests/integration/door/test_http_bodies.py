"""One body rule for every HTTP route, on a real Redis: malformed JSON or a non-object body is a 422
``invalid_json`` with ``field: null``, a pydantic error is a 422 naming the dotted field, and nothing is
stored for a rejected request. The exceptions are deliberate: ``/v1/events`` names a non-object event with
the SDK's ``invalid_type``, and the D-Mail tool answers kimi's ToolError."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from producers.http.app import create_web_app
from tests.conftest import ROOT
from worker.keys.layout import BucketKeys

pytestmark = pytest.mark.integration

BODY_ROUTES = [
    ("PUT", "/v1/sessions/s1"),
    ("POST", "/v1/sessions/s1/context/messages"),
    ("POST", "/v1/sessions/s1/context/checkpoint"),
    ("POST", "/v1/sessions/s1/context/revert"),
    ("POST", "/v1/sessions/s1/context/compact"),
    ("POST", "/v1/sessions/s1/steps/end"),
    ("POST", "/v1/sessions/s1/signal"),
    ("POST", "/v1/sessions/s1/functions/activate"),
    ("POST", "/v1/sessions/s1/functions/deactivate"),
    ("POST", "/v1/sessions/s1/turn"),
    ("POST", "/v1/sessions/s1/idle"),
    ("POST", "/v1/sessions/s1/tool"),
    ("PUT", "/v1/sessions/s1/artifacts/notes"),
    ("PUT", "/v1/features/self-iteration/u1"),
    ("POST", "/v1/dlq/redrive"),
    ("POST", "/v1/route"),
]


@pytest.fixture
def client(make_settings: Any) -> Iterator[TestClient]:
    settings = make_settings(router_config=str(ROOT / "bench" / "data" / "router.yaml"))
    with TestClient(create_web_app(settings)) as c:
        yield c


def _stored(redis_client: Redis, keys: BucketKeys) -> list[str]:
    return [
        k
        for k in redis_client.scan_iter(match=f"{keys.prefix}*")
        if ":broker:" not in k and not k.endswith("-secret")
    ]


def _send(client: TestClient, method: str, path: str, content: bytes) -> Any:
    return client.request(method, path, content=content, headers={"content-type": "application/json"})


@pytest.mark.parametrize(("method", "path"), BODY_ROUTES)
def test_malformed_json_is_invalid_json(
    client: TestClient, redis_client: Redis, keys: BucketKeys, method: str, path: str
) -> None:
    """A body that is not JSON: 422 invalid_json, field null, the decoder's reason, nothing stored."""
    response = _send(client, method, path, b'{"type": ')
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "invalid_json" and error["field"] is None
    assert error["message"].startswith("request body is not valid JSON: ")
    assert _stored(redis_client, keys) == []


@pytest.mark.parametrize(("method", "path"), BODY_ROUTES)
def test_non_object_body_is_invalid_json(client: TestClient, method: str, path: str) -> None:
    """A JSON value that is not an object where one is required: the same 422 invalid_json."""
    response = _send(client, method, path, b"[1, 2]")
    assert response.status_code == 422
    assert response.json()["error"] == {
        "code": "invalid_json",
        "message": "request body must be a JSON object",
        "field": None,
    }


@pytest.mark.parametrize("path", ["/v1/keys", "/v1/tokens"])
@pytest.mark.parametrize("content", [b"[]", b"5", b"null", b""])
def test_a_model_body_that_is_no_object_is_invalid_json_too(
    client: TestClient, path: str, content: bytes
) -> None:
    """The routes whose body FastAPI validates (``POST /v1/keys``, ``/v1/tokens``) answered ``[]`` with
    ``"field": null`` and a message starting ``None:``; now the same 422 invalid_json as every other route."""
    response = _send(client, "POST", path, content)
    assert response.status_code == 422
    assert response.json()["error"] == {
        "code": "invalid_json",
        "message": "request body must be a JSON object",
        "field": None,
    }


def test_events_keep_the_sdk_error_for_a_non_object(client: TestClient) -> None:
    """/v1/events takes any JSON value and lets the SDK's parser name it (as the SDK and CLI do)."""
    response = _send(client, "POST", "/v1/events", b"[1, 2]")
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "invalid_type"
    malformed = _send(client, "POST", "/v1/events", b"{")
    assert malformed.status_code == 422 and malformed.json()["error"]["field"] is None


def test_pydantic_errors_name_the_dotted_field(client: TestClient) -> None:
    """Unknown, missing and wrongly typed fields each have their code; nested paths are dotted."""
    unknown = client.post("/v1/sessions/s1/turn", json={"userMesaged": True}).json()["error"]
    assert unknown == {
        "code": "unknown_field",
        "message": "userMesaged is not a field of this request",
        "field": "userMesaged",
    }
    missing = client.post("/v1/sessions/s1/functions/activate", json={}).json()["error"]
    assert missing == {"code": "missing_field", "message": "name is required", "field": "name"}
    nested = client.post("/v1/sessions/s1/context/messages", json={"messages": ["hi"]}).json()["error"]
    assert nested == {
        "code": "invalid_type",
        "message": "messages.0 must be a JSON object",
        "field": "messages.0",
    }
    typed = client.put("/v1/features/self-iteration/u1", json={"enabled": "yes"}).json()["error"]
    assert typed["code"] == "invalid_field" and typed["field"] == "enabled"


def test_session_id_is_checked_before_the_body(client: TestClient) -> None:
    """A bad session id is named even when the body is bad too (the id comes first, as before)."""
    response = _send(client, "POST", "/v1/sessions/has space/turn", b"{")
    assert response.status_code == 422 and response.json()["error"]["field"] == "sessionId"


def test_dmail_answers_a_tool_error_for_malformed_json(client: TestClient) -> None:
    """The D-Mail tool keeps kimi's semantics: a 200 ToolError, not an HTTP error."""
    response = _send(client, "POST", "/v1/sessions/s1/dmail", b'{"message": ')
    assert response.status_code == 200
    body = response.json()
    assert body["isError"] is True and body["brief"] == "Invalid arguments"
    assert body["message"].startswith("Error parsing JSON arguments: ")


def test_empty_body_reads_as_an_empty_object(client: TestClient) -> None:
    """No body at all is ``{}``: a route whose fields are all optional answers normally."""
    response = client.post("/v1/sessions/s1/context/checkpoint")
    assert response.status_code == 200 and response.json() == {"checkpointId": 0}


def test_a_token_count_lua_cannot_write_back_exactly_is_a_422(client: TestClient) -> None:
    """A count past 14 digits came back from a revert as ``1e+17`` and every later read of the context was a
    500; it is refused at the door now, and the largest allowed one survives a revert."""
    path = "/v1/sessions/s-tokens/context"
    assert client.put("/v1/sessions/s-tokens", json={}).status_code in (200, 201)
    too_many = client.post(f"{path}/messages", json={"messages": [], "tokenCount": 10**17})
    assert too_many.status_code == 422 and too_many.json()["error"]["field"] == "tokenCount", too_many.text
    assert client.post(f"{path}/checkpoint", json={}).status_code == 200
    most = 10**14 - 1
    told = client.post(
        f"{path}/messages", json={"messages": [{"role": "user", "content": "hi"}], "tokenCount": most}
    )
    assert told.status_code == 200, told.text
    assert client.post(f"{path}/checkpoint", json={}).status_code == 200
    assert client.post(f"{path}/revert", json={"checkpointId": 1}).json()["tokenCount"] == most
    assert client.get(path).json()["tokenCount"] == most


def test_a_full_function_state_is_a_413_on_every_route(make_settings: Any) -> None:
    """Activating a function, or naming functions in a session's settings, over the session's byte cap was a
    500 (``SessionFull`` unanswered); it is the 413 ``session_full`` the other session routes answer."""
    settings = make_settings(max_session_bytes=4000, functions_dir=str(ROOT / "examples" / "functions"))
    with TestClient(create_web_app(settings)) as client:
        for size in (3700, 3600, 3500, 3400, 3300, 3200):
            if client.put("/v1/sessions/s-full/artifacts/a", json={"content": "x" * size}).status_code == 200:
                break
        else:
            pytest.fail("no artifact fitted under the cap")
        for method, path, body in (
            ("POST", "/v1/sessions/s-full/functions/activate", {"name": "approval"}),
            ("PUT", "/v1/sessions/s-full", {"functions": ["approval", "escalation"]}),
        ):
            answer = client.request(method, path, json=body)
            assert answer.status_code == 413 and answer.json()["error"]["code"] == "session_full", answer.text
            assert answer.json()["error"]["field"] == ("name" if "activate" in path else "functions"), (
                answer.text
            )


@pytest.mark.parametrize(
    "query, missing",
    [
        ({"agentId": "a", "topicId": "t"}, "userId"),
        ({"userId": "u1", "topicId": "t"}, "agentId"),
        ({"userId": "u1", "agentId": "a"}, "topicId"),
    ],
)
def test_a_conversation_read_names_the_field_it_lacks(
    client: TestClient, query: dict[str, str], missing: str
) -> None:
    """A walk: ``GET /v1/conversations/messages?userId=u1`` named ``userId`` when ``agentId`` was the one missing."""
    answer = client.get("/v1/conversations/messages", params=query)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == missing
