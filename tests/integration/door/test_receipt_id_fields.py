"""The payload fields a receipt id is made of refuse control characters at the door (policies/self_iteration/
payloads.py): a completion whose ``operationId``, ``selfIteration.marker.sourceId`` or a mutation's ``toolCallId``
or ``apiName`` carries CR, LF or NUL is a 422 naming that field, and nothing is stored; without them it is
admitted."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from producers.http.app import create_web_app
from worker.settings import Settings

pytestmark = pytest.mark.integration

FORGED = '\n\nevent: receipt\ndata: {"id":"forged"}\n\n'


@pytest.fixture
def client(make_settings: Callable[..., Settings]) -> Iterator[TestClient]:
    with TestClient(create_web_app(make_settings())) as c:
        yield c


def _completion(source_id: str, **changes: Any) -> dict[str, Any]:
    """An ``agent.execution.completed`` event whose payload has ``changes`` applied (dotted paths)."""
    payload: dict[str, Any] = {
        "agentId": "a1",
        "operationId": "op_1",
        "selfIteration": {
            "marker": {"sourceId": "msg_1", "kind": "memory"},
            "mutations": [{"apiName": "writeMemory", "toolCallId": "call_1", "data": {}}],
        },
    }
    for path, value in changes.items():
        node = payload
        *parents, last = path.split(".")
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[last] = value
    return {
        "sourceType": "agent.execution.completed",
        "sourceId": source_id,
        "userId": "u1",
        "payload": payload,
    }


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        ("operationId", f"op_1{FORGED}", "payload.operationId"),
        ("selfIteration.marker.sourceId", "msg_1\r:x", "payload.selfIteration.marker.sourceId"),
        (
            "selfIteration.mutations.0.toolCallId",
            "call\x00_1",
            "payload.selfIteration.mutations.0.toolCallId",
        ),
        ("selfIteration.mutations.0.apiName", "writeMemory\n", "payload.selfIteration.mutations.0.apiName"),
    ],
    ids=["operationId", "marker.sourceId", "toolCallId", "apiName"],
)
def test_a_control_character_in_a_receipt_id_field_is_refused(
    client: TestClient, path: str, value: str, field: str
) -> None:
    """The field is named in a 422 invalid_field, and the event is not stored."""
    refused = client.post("/v1/events", json=_completion("refused-1", **{path: value}))
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert (error["code"], error["field"]) == ("invalid_field", field), error
    assert "must not contain" in error["message"] and "allowed:" in error["message"]
    assert client.get("/v1/events", params={"limit": 10}).json()["events"] == []


def test_a_completion_with_clean_ids_is_admitted(client: TestClient) -> None:
    """The same payload without control characters is accepted."""
    accepted = client.post("/v1/events", json=_completion("clean-1"))
    assert accepted.status_code == 202, accepted.text
    assert accepted.json()["results"][0]["status"] == "accepted"


@pytest.mark.parametrize(
    ("marker", "field"),
    [
        ({"sourceId": "s" * 3000}, "payload.selfIteration.marker.sourceId"),
        ({"sourceId": "s1", "agentId": {"x": 1}}, "payload.selfIteration.marker.agentId"),
        ({"sourceId": "s1", "topicId": ["t"]}, "payload.selfIteration.marker.topicId"),
    ],
)
def test_a_marker_id_that_breaks_the_id_rule_is_refused(
    client: TestClient, marker: dict[str, Any], field: str
) -> None:
    """A 3,000-character sourceId made a receipt whose rollback then answered 422; an object as agentId was
    copied into the receipt as an object. The marker's ids follow the door's id rule."""
    answer = client.post("/v1/events", json=_completion("marker-1", **{"selfIteration.marker": marker}))
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == field
