"""The door and the worker agree about every shipped source type (issue 28, item 3).

Through the real HTTP door: every source type a shipped plugin declares is accepted with a minimal payload built
from its plugins' payload schemas, and refused with a 422 naming the field when any required field (derived from
the schemas) is missing. Through a real worker: the same minimal payloads, all in one run, end done and none dead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from producers.http.app import create_web_app
from tests.conftest import ROOT, wait_for
from tests.support.payload_schemas import (
    minimal_payload,
    required_paths,
    schemas_of,
    shipped_plugins,
    shipped_source_types,
    without,
)
from worker.plugin import Plugin
from worker.settings import Settings

pytestmark = pytest.mark.integration

ROUTER_CONFIG = ROOT / "bench" / "data" / "router.yaml"  # chat.request needs a router in the worker


@pytest.fixture
def door(make_settings: Callable[..., Settings]) -> Iterator[tuple[TestClient, list[Plugin]]]:
    settings = make_settings(router_config=str(ROUTER_CONFIG))
    with TestClient(create_web_app(settings)) as client:
        yield client, shipped_plugins(settings)


def _event(source_type: str, source_id: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {"sourceType": source_type, "sourceId": source_id, "payload": payload}


def test_a_tool_outcome_without_tool_identifier_is_refused_at_the_door(
    door: tuple[TestClient, list[Plugin]],
) -> None:
    """Issue 28: a tool outcome without tool.identifier was accepted (202) and died on its first attempt; now it
    is a 422 naming payload.tool.identifier (events[i]. in a batch) and nothing is stored."""
    client, _ = door
    payload = {"tool": {"apiName": "write"}, "outcome": {"status": "failed"}}
    event = {**_event("tool.outcome.failed", "no-identifier", payload), "scopeKey": "topic:no-identifier"}
    single = client.post("/v1/events", json=event)
    assert single.status_code == 422, single.text
    assert single.json()["error"] == {
        "code": "missing_field",
        "message": "payload.tool.identifier is required",
        "field": "payload.tool.identifier",
    }
    batch = client.post("/v1/events", json={"events": [event]})
    assert batch.status_code == 422 and batch.json()["error"]["field"] == "events[0].payload.tool.identifier"
    assert client.get("/v1/events", params={"scopeKey": "topic:no-identifier"}).json()["events"] == []


def test_every_shipped_source_type_is_accepted_and_each_missing_required_field_is_named(
    door: tuple[TestClient, list[Plugin]],
) -> None:
    """Each declared source type: its minimal payload is accepted (202); without any one required field it is a
    422 whose field names that field (missing_field), and that event is not stored."""
    client, plugins = door
    types = shipped_source_types(plugins)
    walked = 0
    for source_type in types:
        models = schemas_of(plugins, source_type)
        payload = minimal_payload(models)
        accepted = client.post("/v1/events", json=_event(source_type, f"walk-{source_type}", payload))
        assert accepted.status_code == 202, (source_type, accepted.text)
        assert accepted.json()["results"][0]["status"] == "accepted", source_type
        for path in required_paths(models):
            missing = _event(source_type, f"walk-{source_type}-{'.'.join(path)}", without(payload, path))
            refused = client.post("/v1/events", json=missing)
            field = "payload." + ".".join(path)
            assert refused.status_code == 422, (source_type, path, refused.text)
            assert refused.json()["error"]["field"] == field, (source_type, refused.text)
            assert refused.json()["error"]["code"] == "missing_field", (source_type, refused.text)
            walked += 1
    listed = client.get("/v1/events", params={"limit": 200}).json()["events"]
    assert sorted(e["sourceType"] for e in listed) == types  # the refused ones stored nothing
    # at least: the tool outcomes 2 x 4, chat.request 1, D-Mail 2, the three review sources 21
    assert walked >= 32


def test_the_worker_drains_a_minimal_payload_of_every_shipped_source_type(
    door: tuple[TestClient, list[Plugin]], make_settings: Callable[..., Settings], start_worker: Any
) -> None:
    """What the door admits the worker can process: every shipped source type's minimal payload, sent in one
    batch, ends done; the dead-letter list stays empty."""
    client, plugins = door
    start_worker(make_settings(router_config=str(ROUTER_CONFIG)))
    types = shipped_source_types(plugins)
    events = [_event(t, f"drain-{t}", minimal_payload(schemas_of(plugins, t))) for t in types]
    answer = client.post("/v1/events", json={"events": events})
    assert answer.status_code == 202, answer.text
    ids = {r["eventId"]: t for r, t in zip(answer.json()["results"], types, strict=True)}

    def final() -> dict[str, str] | None:
        states = {t: client.get(f"/v1/events/{e}").json()["status"] for e, t in ids.items()}
        return states if all(s in ("done", "dead") for s in states.values()) else None

    states = wait_for(final, timeout_s=120, interval_s=0.2, what="every shipped source type to finish")
    errors = {t: client.get(f"/v1/events/{e}").json().get("error") for e, t in ids.items()}
    assert states == dict.fromkeys(types, "done"), errors
    assert client.get("/v1/dlq").json()["total"] == 0
