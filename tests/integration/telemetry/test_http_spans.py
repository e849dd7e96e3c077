"""The web app's SERVER spans are named by the route's template, as the access log names requests: the path as
sent names users, scopes and events (an erasure's own request named the erased user to the tracing backend),
and a caller sending made-up paths could mint span names without end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from producers.http.access_log import NO_ROUTE
from producers.http.app import create_web_app
from tests.conftest import wait_for

pytestmark = pytest.mark.integration


def _spans(trace_file: Path) -> list[dict[str, Any]]:
    if not trace_file.exists():
        return []
    return [json.loads(line) for line in trace_file.read_text().splitlines()]


def _server_spans(trace_file: Path) -> list[dict[str, Any]]:
    return [s for s in _spans(trace_file) if "http.request.method" in s["attributes"]]


def test_server_spans_name_the_route_not_the_path(make_settings: Any, tmp_path: Path) -> None:
    trace_file = tmp_path / "spans.jsonl"
    settings = make_settings(trace_file=str(trace_file))
    with TestClient(create_web_app(settings)) as client:
        client.delete("/v1/users/erin@example.com")
        client.post("/v1/scopes/user:carol@example.com/pause")
        client.get("/v1/made-up-path-1796531916")
    spans = wait_for(lambda: _server_spans(trace_file)[2:] and _server_spans(trace_file), what="three spans")
    names = sorted(s["name"] for s in spans)
    assert names == [
        "DELETE /v1/users/{user_id}",
        f"GET {NO_ROUTE}",
        "POST /v1/scopes/{scope_key}/pause",
    ], names
    assert all(s["attributes"]["http.route"] == s["name"].split(" ", 1)[1] for s in spans)
    exported = json.dumps(spans)
    for raw in ("erin@example.com", "carol@example.com", "1796531916"):
        assert raw not in exported
