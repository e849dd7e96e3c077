"""The OpenAPI document is a working manual (issue 28, item 4): every example in ``/openapi.json`` (request
bodies, parameters, responses; OpenAPI ``example``/``examples`` and JSON Schema ``examples``) validates against
its own schema, every operation with a body offers one (Swagger UI's "Try it out" starts from the first; before
there was none it built one from the schema, which the door refused with a 422), and each request example is
accepted by a real app on this test's Redis prefix: posted in the document's order (one session walks the
session routes as a reader would), each answers 2xx.

Path parameters take their declared example when there is one, else one fixed value per parameter name (so
the session examples build on each other: a checkpoint, then a revert to it). The app has a bootstrap key and
every call is made with it, so ``POST /v1/keys`` creating a key changes nothing for the calls after it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from jsonschema import Draft202012Validator

from producers.http.app import create_web_app
from producers.http.routes.session_access import SESSION_ID
from tests.conftest import ROOT

pytestmark = pytest.mark.integration

BOOT = "bootstrap-key-for-the-examples-test-0123456789"
ADMIN = {"Authorization": f"Bearer {BOOT}"}
METHODS = ("get", "put", "post", "delete", "patch")


@pytest.fixture
def client(make_settings: Any, tmp_path: Path) -> Iterator[TestClient]:
    router = tmp_path / "router.yaml"
    router.write_text((ROOT / "bench" / "data" / "router.yaml").read_text())
    settings = make_settings(
        bootstrap_key=BOOT,
        rate_limit_per_s=0,
        functions_dir=str(ROOT / "examples" / "functions"),
        router_config=str(router),
    )
    with TestClient(create_web_app(settings)) as test_client:
        yield test_client


def _document(client: TestClient) -> dict[str, Any]:
    answer = client.get("/openapi.json", headers=ADMIN)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def _values(node: dict[str, Any]) -> list[Any]:
    """The example values an OpenAPI media type or parameter object declares."""
    values = [node["example"]] if "example" in node else []
    return values + [named["value"] for named in node.get("examples", {}).values() if "value" in named]


def _examples(node: Any, where: str) -> Iterator[tuple[str, dict[str, Any], Any]]:
    """(where, schema, value) for every example under ``node``."""
    if isinstance(node, list):
        for index, item in enumerate(node):
            yield from _examples(item, f"{where}/{index}")
        return
    if not isinstance(node, dict):
        return
    if isinstance(node.get("schema"), dict):  # a media type or parameter object
        for value in _values(node):
            yield where, node["schema"], value
    if isinstance(node.get("examples"), list):  # a JSON Schema's own examples
        for value in node["examples"]:
            yield where, node, value
    for key, child in node.items():
        if key not in ("example", "examples"):
            yield from _examples(child, f"{where}/{key}")


def test_every_example_validates_against_its_schema(client: TestClient) -> None:
    """Each example in the document is valid under the schema it sits next to (refs resolved in the document),
    and every operation with a request body has at least one."""
    document = _document(client)
    found, problems = 0, []
    for where, schema, value in _examples(document["paths"], "#/paths"):
        found += 1
        validator = Draft202012Validator({**schema, "components": document.get("components", {})})
        problems += [
            f"{where}: {error.message} at {list(error.absolute_path)}"
            for error in validator.iter_errors(value)
        ]
    assert not problems, "\n".join(problems)
    missing = [
        f"{method.upper()} {path}"
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if method in METHODS
        and "requestBody" in operation
        and not _values(operation["requestBody"]["content"]["application/json"])
    ]
    assert not missing, f"operations with a body and no example: {missing}"
    assert found >= 21, f"only {found} examples"  # one per operation with a body, at least


def _path(path: str, operation: dict[str, Any]) -> str:
    """``path`` with each path parameter filled: its example, else ``example-<name>`` (one per name)."""
    for parameter in operation.get("parameters", []):
        if parameter["in"] == "path":
            values = _values(parameter) or [f"example-{parameter['name'].replace('_', '-')}"]
            path = path.replace("{" + parameter["name"] + "}", str(values[0]))
    return path


def test_every_request_example_is_accepted_by_the_server(client: TestClient) -> None:
    """In the document's order, each operation's request examples are sent as they stand: each answers 2xx
    (POST /v1/events's example was a 422 in Swagger's "Try it out")."""
    document = _document(client)
    sent, refused = [], []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
            for value in _values(body) if method in METHODS else []:
                url = _path(path, operation)
                answer = client.request(method, url, json=value, headers=ADMIN)
                sent.append(f"{method.upper()} {path}")
                if not 200 <= answer.status_code < 300:
                    refused.append(
                        f"{method.upper()} {url} {value}: {answer.status_code} {answer.text[:300]}"
                    )
    assert not refused, "\n".join(refused)
    assert sent.count("POST /v1/events") >= 2, sent  # one event, and a batch
    assert len(sent) >= 21, sent


def test_self_iteration_parameters_say_who_must_give_them(client: TestClient) -> None:
    """A ``userId`` that a user token may leave out (its own user is read) is optional and its description
    says who must give it; ``agentId``, which every caller gives, is required; the rollback declares the 409
    ``ambiguous_receipt_id`` it answers a key that names no user (it was undeclared)."""
    paths = _document(client)["paths"]
    reads = [
        ("/v1/memories", "get"),
        ("/v1/memories/{memory_id}", "get"),
        ("/v1/skills", "get"),
        ("/v1/skills/{document_id}", "get"),
        ("/v1/receipts/stream", "get"),
        ("/v1/receipts/{receipt_id}/rollback", "post"),
    ]
    for path, method in reads:
        parameters = {p["name"]: p for p in paths[path][method]["parameters"]}
        user = parameters["userId"]
        assert not user.get("required") and "user token" in user.get("description", ""), (path, user)
        if path.startswith("/v1/skills"):
            assert parameters["agentId"]["required"] is True, (path, parameters["agentId"])
    responses = paths["/v1/receipts/{receipt_id}/rollback"]["post"]["responses"]
    assert "ambiguous_receipt_id" in responses["409"]["description"], responses.keys()


def test_every_session_route_publishes_the_session_id_rule(client: TestClient) -> None:
    """The door checks a session id on every session route, but the routes with a body declared it a plain
    string in the document (their dependency's ``session_id: str``): a typed client read the rule off the GET
    routes only. Each ``session_id`` path parameter now carries the pattern, and a caller it refuses is told so."""
    spec = _document(client)
    published = {
        (method, path): parameter["schema"].get("pattern")
        for path, operations in spec["paths"].items()
        for method, operation in operations.items()
        for parameter in operation.get("parameters", [])
        if parameter["name"] == "session_id"
    }
    assert len(published) >= 20 and {p for p in published.values()} == {SESSION_ID.pattern}, published
    refused = client.post(
        "/v1/sessions/bad%20id/dmail", json={"message": "x", "checkpoint_id": 0}, headers=ADMIN
    )
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "sessionId"
