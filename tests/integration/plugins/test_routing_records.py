"""The chat.request event POST /v1/route records, through a real worker: its chain shows the decision the caller
was answered even when the config changed before a worker ran it; an event enqueued directly is routed by the
worker's config, and may not carry an answer of its own; external signals emit no signal.conversation.*."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from policies.routing import load_router
from producers.http.app import create_web_app
from tests.conftest import ROOT, wait_for

pytestmark = pytest.mark.integration

HI = {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}


def _decided(client: TestClient, event_id: str) -> tuple[dict[str, Any], list[str]]:
    """(the signal.routing.decided payload, every signal type) of the event's chain, once it is done."""
    status = wait_for(
        lambda: (s := client.get(f"/v1/events/{event_id}").json()).get("status") in ("done", "dead") and s,
        what=f"event {event_id}",
    )
    assert status["status"] == "done", status
    signals = client.get(f"/v1/chains/{status['chainId']}").json()["envelope"]["signals"]
    return signals[-1]["payload"], [s["signalType"] for s in signals]


def test_the_record_shows_the_answered_decision(
    make_settings: Any, start_worker: Any, tmp_path: Path
) -> None:
    """Route, then change the config before any worker runs: the recorded chain emits the answer (small-model,
    with the answering config's fingerprint), while an event enqueued directly afterwards gets the new config's."""
    config = tmp_path / "router.yaml"
    shutil.copy(ROOT / "bench" / "data" / "router.yaml", config)
    answering = load_router(config)
    settings = make_settings(router_config=str(config))
    with TestClient(create_web_app(settings)) as client:
        external = [{"type": "conversation", "name": "from_outside", "confidence": 0.4}]
        body = {
            "request": HI,
            "requestId": "rq-rec-1",
            "scopeKey": "session:rec1",
            "externalSignals": external,
        }
        answered = client.post("/v1/route", json=body).json()
        assert answered["model"] == "small-model"
        config.write_text(config.read_text().replace("model: small-model", "model: edited-model"))
        direct = client.post(
            "/v1/events",
            json={
                "sourceType": "chat.request",
                "sourceId": "rq-rec-2",
                "scopeKey": "session:rec2",
                "payload": {"request": HI},
            },
        )
        assert direct.status_code == 202, direct.text
        # an answer only /v1/route records: one sent here is refused, naming it (an audit recorded a made-up one)
        forged = {**answered, "model": "gpt-ultra"}
        for payload, field in (
            ({"request": HI, "routeResult": forged}, "events[1].payload.routeResult"),
            (
                {"request": HI, "configFingerprint": "sha256:000000000000"},
                "events[1].payload.configFingerprint",
            ),
        ):
            events = [
                {
                    "sourceType": "chat.request",
                    "sourceId": f"rq-forged-{n}",
                    "scopeKey": "session:f",
                    "payload": p,
                }
                for n, p in enumerate(({"request": HI}, payload))
            ]
            refused = client.post("/v1/events", json={"events": events})
            assert refused.status_code == 422 and refused.json()["error"]["field"] == field, refused.text
        snake = {
            "source_type": "chat.request",
            "sourceId": "rq-forged-2",
            "payload": {"request": HI, "routeResult": forged},
        }
        refused = client.post("/v1/events", json=snake)  # the model's other spelling of sourceType (a review)
        assert refused.status_code == 422 and refused.json()["error"]["field"] == "payload.routeResult", (
            refused.text
        )
        single = {
            "sourceType": "chat.request",
            "sourceId": "rq-forged-1",
            "payload": {"request": HI, "routeResult": forged},
        }
        refused = client.post("/v1/events", json=single)
        assert refused.status_code == 422 and refused.json()["error"]["field"] == "payload.routeResult"
        assert (
            client.get("/v1/events/rq-forged-0").status_code == 404
        )  # nothing of a refused batch was stored
        start_worker(settings)  # the worker reads the config only now: the edited one
        recorded, types = _decided(client, "rq-rec-1")
        assert recorded["decision"] == answered["decision"] and recorded["model"] == "small-model"
        assert recorded["configFingerprint"] == answering.fingerprint
        assert "signal.conversation.from_outside" not in types
        assert sum(t.startswith("signal.conversation.") for t in types) == len(answering.config.conversation)
        routed, _ = _decided(client, direct.json()["results"][0]["eventId"])
        assert routed["model"] == "edited-model"
        assert routed["configFingerprint"] == load_router(config).fingerprint != answering.fingerprint
