"""The OpenAPI document holds: schemathesis calls every operation of ``/openapi.json`` with generated input
(valid under the declared schema, then invalid) and checks each answer: never a server error, a declared
status code and content type, and a body that conforms to the schema declared for that status.

Two runs on a real Redis (each cut in ``SHARDS`` tests of its own key prefix): the app with no credential configured (every caller is
the local admin), and the app with a bootstrap key, called with an ``operate`` API key (so the admin-only
routes answer their declared 403). Examples are bounded (``MAX_EXAMPLES`` per operation and mode; invalid
input only where there is a body or a query to break) and derandomized: the same inputs on every run. Random
ids mostly find nothing, so a third test walks a world with data (a worker's receipts, memories and skill, a
session with a D-Mail applied and a function gated) through the same checks, and a fourth keeps what a
longer run (150 examples) found.

What is left out, and why:

* ``GET /v1/receipts/stream`` (server-sent events) stays open until the client leaves;
  tests/integration/door/test_http_stream.py and tests/security/tenants/test_streams.py cover it.
* Creating a key ends the no-credential mode (the app then needs credentials), so the local run calls
  ``POST /v1/keys`` last; its answers after the first key are the declared 401.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.python import asgi
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from producers.http.app import create_web_app
from tests.conftest import ROOT, wait_for

pytestmark = pytest.mark.integration

BOOT = "bootstrap-key-for-the-schema-test-0123456789"
# per operation and generation mode: 15 in make test (at 25 this file took 68 s of the suite's ~890 s of test CPU,
# docs/decisions.md); SCHEMA_EXAMPLES=150 for a longer run like the one test_inputs_a_longer_run_found keeps
MAX_EXAMPLES = int(os.environ.get("SCHEMA_EXAMPLES", "15"))
# Each run is cut in SHARDS tests of every SHARDS-th operation, each on its own app and key prefix: xdist spreads
# them, and none comes near the 120 s timeout on a busy machine (one whole run took 63 s alone, 120+ under load).
SHARDS = 3
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
SKIPPED = {"GET /v1/receipts/stream": "a stream that stays open (covered by test_http_stream, test_streams)"}
LAST = ("POST /v1/keys",)  # the first key created ends the no-credential mode


def _settings_kwargs(tmp_path: Path) -> dict[str, Any]:
    router = tmp_path / "router.yaml"
    router.write_text((ROOT / "bench" / "data" / "router.yaml").read_text())
    return {"functions_dir": str(ROOT / "examples" / "functions"), "router_config": str(router)}


def _order(label: str) -> tuple[bool, str]:
    return label in LAST, label


def _run_operation(operation: Any, mode: GenerationMode, headers: dict[str, str]) -> str | None:
    """The findings of one operation in one mode (None when it holds)."""

    @settings(
        max_examples=MAX_EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def call(case: Any) -> None:
        case.call_and_validate(headers=headers, checks=CHECKS)

    try:
        call()
    except Unsatisfiable as exc:
        if mode is GenerationMode.NEGATIVE:
            return None  # nothing here can be made invalid (say, only an optional string parameter)
        return f"{operation.label} ({mode.value}): no input could be generated: {exc}"
    except (Exception, BaseExceptionGroup) as exc:  # schemathesis' FailureGroup, or the app's own error
        return f"{operation.label} ({mode.value}):\n{exc}"
    return None


def _run_schema(app: Any, headers: dict[str, str], shard: int) -> tuple[list[str], int, int]:
    """Every ``SHARDS``-th operation from ``shard`` on, valid input then invalid: (findings, operations run,
    operations in the whole document). ``LAST`` stays last in its shard."""
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, headers=headers)
    operations = sorted((r.ok() for r in schema.get_all_operations()), key=lambda op: _order(op.label))
    findings: list[str] = []
    ran = 0
    try:
        for operation in operations[shard::SHARDS]:
            if operation.label in SKIPPED:
                continue
            ran += 1
            # Invalid input needs a body or a query parameter: any text is a valid path segment.
            negatable = len(operation.body) > 0 or len(operation.query) > 0
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)[: 2 if negatable else 1]:
                if (finding := _run_operation(operation, mode, headers)) is not None:
                    findings.append(finding)
    finally:
        asgi.shutdown_lifespans()  # the app's shutdown: producer, feed and telemetry closed
    return findings, ran, len(operations)


def _report(findings: list[str]) -> str:
    return f"{len(findings)} finding(s):\n\n" + "\n\n".join(f[:4000] for f in findings)


@pytest.mark.parametrize("shard", range(SHARDS))
def test_no_credential_configured(make_settings: Any, tmp_path: Path, shard: int) -> None:
    """As the local admin (no credential configured), every operation answers what it declares."""
    app = create_web_app(make_settings(**_settings_kwargs(tmp_path)))
    findings, ran, total = _run_schema(app, {}, shard)
    assert total >= 40, f"only {total} operations in /openapi.json"
    assert ran >= total // SHARDS - len(SKIPPED), f"shard {shard} ran {ran} of {total} operations"
    assert not findings, _report(findings)


@pytest.mark.parametrize("shard", range(SHARDS))
def test_with_an_api_key(make_settings: Any, tmp_path: Path, shard: int) -> None:
    """With credentials configured and an operate key, every operation answers what it declares."""
    settings_ = make_settings(bootstrap_key=BOOT, rate_limit_per_s=0, **_settings_kwargs(tmp_path))
    with TestClient(create_web_app(settings_)) as client:
        created = client.post(
            "/v1/keys", json={"role": "operate"}, headers={"Authorization": f"Bearer {BOOT}"}
        )
        assert created.status_code == 201, created.text
    headers = {"Authorization": f"Bearer {created.json()['key']}"}
    findings, ran, total = _run_schema(create_web_app(settings_), headers, shard)
    assert ran >= total // SHARDS - len(SKIPPED), f"shard {shard} ran {ran} of {total} operations"
    assert not findings, _report(findings)


def test_inputs_a_longer_run_found(make_settings: Any, tmp_path: Path) -> None:
    """Kept from a run with 150 examples per operation: a cursor whose first part is not a number reached
    Redis as a range bound (a 503), and a non-string ``request.model`` came back as the answer's ``model``."""
    with TestClient(create_web_app(make_settings(**_settings_kwargs(tmp_path)))) as client:
        page = client.get("/v1/receipts", params={"userId": "u1", "cursor": "p:rcpt_1"})
        assert page.status_code == 422 and page.json()["error"]["field"] == "cursor", page.text
        routed = client.post("/v1/route", json={"request": {"model": 5, "messages": []}})
        assert routed.status_code == 422, routed.text
        assert routed.json()["error"] == {
            "code": "invalid_field",
            "message": "request.model: must be a string",
            "field": "request.model",
        }


USER, AGENT, TOPIC, SESSION = "u-schema", "agt_schema", "tpc-schema", "sess-schema"


class Tour:
    """Calls named operations with chosen input through schemathesis, each answer checked like the runs'."""

    def __init__(self, schema: Any) -> None:
        self.schema = schema
        self.client = asgi.get_client(schema.app)  # the lifespan schemathesis started when it loaded

    def call(self, label: str, body: Any = None, **params: dict[str, Any]) -> Any:
        operation = self.schema.find_operation_by_label(label)
        assert operation is not None, f"{label} is not in /openapi.json"
        extra: dict[str, Any] = {} if body is None else {"body": body, "media_type": "application/json"}
        case = operation.Case(path_parameters=params.get("path"), query=params.get("query"), **extra)
        return case.call_and_validate(checks=CHECKS).json()

    def send(self, source_id: str, text: str) -> str:
        event = {
            "sourceType": "agent.user.message",
            "sourceId": source_id,
            "userId": USER,
            "agentId": AGENT,
            "payload": {"agentId": AGENT, "topicId": TOPIC, "messageId": source_id, "message": text},
        }
        answer = self.client.post("/v1/events", json=event)
        assert answer.status_code == 202, answer.text
        return str(answer.json()["results"][0]["eventId"])


def _self_iteration(tour: Tour) -> None:
    tour.send("s-m1", "Going forward, I prefer short answers.")
    tour.send("s-s1", 'Please create a skill called "release-check": run the tests, tag.')
    owner = {"userId": USER, "agentId": AGENT, "topicId": TOPIC}

    def skill_receipts() -> Any:
        receipts = tour.call("GET /v1/receipts", query=owner)["receipts"]
        return [r for r in receipts if r["kind"] == "skill"]

    skill = wait_for(skill_receipts, timeout_s=90, what="a skill receipt")[0]
    memory = tour.call("GET /v1/memories", query={"userId": USER})["memories"][0]
    tour.call("GET /v1/memories/{memory_id}", path={"memory_id": memory["id"]}, query={"userId": USER})
    tour.call("GET /v1/skills", query={"userId": USER, "agentId": AGENT})
    document = {"document_id": skill["metadata"]["documentId"]}
    tour.call("GET /v1/skills/{document_id}", path=document, query={"userId": USER, "agentId": AGENT})
    tour.call("POST /v1/receipts/{receipt_id}/rollback", path={"receipt_id": skill["id"]})
    tour.call("GET /v1/conversations")
    assert tour.call("GET /v1/conversations/messages", query=owner)["messages"]
    tour.call("PUT /v1/features/self-iteration/{user_id}", {"enabled": True}, path={"user_id": USER})


def _session(tour: Tour) -> None:
    at, path = "/v1/sessions/{session_id}", {"session_id": SESSION}
    tour.call(f"PUT {at}", {"dmailEnabled": True, "userId": USER, "functions": ["approval"]}, path=path)
    tour.call(f"POST {at}/context/checkpoint", {}, path=path)
    tour.call(f"POST {at}/context/messages", {"messages": [{"role": "user", "content": "hi"}]}, path=path)
    tour.call(f"POST {at}/context/checkpoint", {}, path=path)
    tour.call(f"POST {at}/dmail", {"message": "try again", "checkpoint_id": 0}, path=path)
    assert tour.call(f"POST {at}/steps/end", {}, path=path)["outcome"] == "applied"
    tour.call(f"POST {at}/context/revert", {"checkpointId": 0}, path=path)
    tour.call(f"POST {at}/context/compact", {"messages": [{"role": "user", "content": "hi"}]}, path=path)
    tour.call(f"POST {at}/signal", {"type": "need_approval", "payload": {"plan": "ship"}}, path=path)
    assert tour.call(f"GET {at}/attention", path=path)["items"]
    tour.call(f"POST {at}/turn", {"userMessaged": True}, path=path)
    tour.call(f"POST {at}/tool", {"name": "signal", "args": {"type": "answer"}}, path=path)
    tour.call(f"PUT {at}/artifacts/{{name}}", {"content": "ship"}, path={**path, "name": "approved_plan"})
    tour.call(f"POST {at}/functions/activate", {"name": "escalation"}, path=path)
    tour.call(f"POST {at}/functions/deactivate", {"name": "escalation"}, path=path)
    # the settings keep it active: 409 function_locked, undeclared until a TypeScript walk met it
    assert tour.call(f"POST {at}/functions/deactivate", {"name": "approval"}, path=path)["error"]["code"] == (
        "function_locked"
    )
    tour.call(f"POST {at}/idle", {}, path=path)
    for label in (f"GET {at}", f"GET {at}/context", f"GET {at}/state", f"GET {at}/artifacts"):
        tour.call(label, path=path)
    tour.call(f"POST {at}/context/clear", path=path)


def test_answers_over_real_data_conform(make_settings: Any, tmp_path: Path, start_worker: Any) -> None:
    """With a worker and data (receipts, memories, a skill, a conversation, a session with a D-Mail applied and
    functions gated), the answers that carry it conform too: the runs' random ids mostly find nothing."""
    settings_ = make_settings(**_settings_kwargs(tmp_path))
    start_worker(settings_)
    schema = schemathesis.openapi.from_asgi("/openapi.json", create_web_app(settings_))
    try:
        tour = Tour(schema)
        _self_iteration(tour)
        _session(tour)
        tour.call("GET /v1/overview")
        tour.call("POST /v1/route", {"request": {"messages": [{"role": "user", "content": "hi"}]}})
        tour.call("POST /v1/tokens", {"userId": USER})
        assert tour.call("DELETE /v1/users/{user_id}", path={"user_id": USER})["removed"]
    finally:
        asgi.shutdown_lifespans()
