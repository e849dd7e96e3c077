"""What POST /v1/route and `agent-signal route` refuse, alike and naming the same fields: numbers that are not
finite or too large for a float, confidences outside 0..1, more than 256 external signals, an external signal
standing in for a config rule or repeating another's type:name, unknown keys, a non-string request.model; and that the CLI reads strict JSON,
writes strict JSON, keeps going past a bad line, and applies --protocol to any input that names none."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from policies.routing import load_router
from producers.cli.route import run_route
from producers.http.app import create_web_app
from producers.http.routes.routing import RouteRequest
from tests.conftest import ROOT

pytestmark = pytest.mark.integration

CONFIG = ROOT / "bench" / "data" / "router.yaml"
HI = {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}
ZEROS = "0" * 400  # 1 followed by 400 zeros: a JSON integer beyond the float range


def _body(signals: str) -> str:
    """A raw route body with the external signals given as JSON text (a huge integer stays one)."""
    return '{"request": {"messages": []}, "externalSignals": [' + signals + "]}"


# (raw JSON body, the field a refusal names)
REFUSED = [
    (_body('{"type": "domain", "name": "x", "value": 1' + ZEROS + "}"), "externalSignals[0].value"),
    (_body('{"type": "domain", "name": "x", "confidence": 1' + ZEROS + "}"), "externalSignals[0].confidence"),
    (_body('{"type": "domain", "name": "x", "confidence": 1e308}'), "externalSignals[0].confidence"),
    (_body('{"type": "domain", "name": "x", "confidence": -0.5}'), "externalSignals[0].confidence"),
    (
        _body(", ".join(f'{{"type": "conversation", "name": "n{i}"}}' for i in range(257))),
        "externalSignals",
    ),
    (
        _body('{"type": "conversation", "name": "image_input", "error": "classifier down"}'),
        "externalSignals[0].name",
    ),
    (
        _body(
            '{"type": "domain", "name": "d"}, {"type": "Conversation", "name": "image_input", "confidence": 0.2}'
        ),
        "externalSignals[1].name",
    ),
    (  # the same type:name twice: its RouteResult said "not matched, error" while a decision matched on it
        _body(
            '{"type": "domain", "name": "x"}, {"type": "domain", "name": "x", "error": "classifier timeout"}'
        ),
        "externalSignals[1].name",
    ),
    ('{"request": {"messages": []}, "externalSignal": [{"type": "domain", "name": "x"}]}', "externalSignal"),
    ('{"request": {"model": 5, "messages": []}}', "request.model"),
]


@pytest.fixture
def client(make_settings: Any) -> Iterator[TestClient]:
    settings = make_settings(router_config=str(CONFIG), route_record_events=False)
    with TestClient(create_web_app(settings), raise_server_exceptions=False) as c:
        yield c


def _cli(
    tmp_path: Path,
    *args: str,
    batch: str | None = None,
    source: str | None = None,
    protocol: str = "openai-chat",
) -> tuple[int, list[Any]]:
    """Run `agent-signal route` in process: (exit code, the JSON lines it printed)."""
    out_path = tmp_path / "out.jsonl"
    with out_path.open("w") as out:
        code = run_route(str(CONFIG), source, batch=batch, check=False, protocol=protocol, out=out)
    return code, [json.loads(line) for line in out_path.read_text().splitlines()]


@pytest.mark.parametrize(("body", "field"), REFUSED)
def test_http_refuses_naming_the_field(client: TestClient, body: str, field: str) -> None:
    """Each input is a 422 naming the field (a huge integer was a 500 OverflowError, two 1e308 confidences under
    an AND a 500 for infinity)."""
    response = client.post("/v1/route", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == field


def test_cli_batch_refuses_the_same_lines_and_keeps_going(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same inputs as batch lines, between good ones: each refused line names the same field, every other
    line is routed, and nothing but strict JSON is printed."""
    good = json.dumps({"request": HI})
    batch = tmp_path / "batch.jsonl"
    batch.write_text("\n".join([good, *(body for body, _ in REFUSED), good]) + "\n")
    code, rows = _cli(tmp_path, batch=str(batch))
    assert code == 1
    assert [row.get("error", {}).get("field") for row in rows[1:-1]] == [field for _, field in REFUSED]
    assert rows[0] == rows[-1] == load_router(CONFIG).route(HI)
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_cli_refuses_non_finite_json(tmp_path: Path, literal: str) -> None:
    """NaN, Infinity and floats beyond the range are not JSON: a batch line holding one is refused (the CLI
    printed `Infinity`, which no JSON reader accepts), naming where it is."""
    batch = tmp_path / "batch.jsonl"
    line = '{"request": {"messages": []}, "externalSignals": [{"type": "domain", "name": "x", "value": %s}]}'
    batch.write_text(line % literal + "\n")
    code, rows = _cli(tmp_path, batch=str(batch))
    assert code == 1 and rows[0]["error"]["code"] == "invalid_json"
    assert rows[0]["error"]["field"] == "externalSignals.0.value"


def test_cli_single_file_takes_protocol_when_the_envelope_names_none(tmp_path: Path) -> None:
    """A single file {"request": …} without "protocol" is routed with --protocol, as batch lines are."""
    anthropic = {
        "model": "auto",
        "system": "s",
        "messages": [
            {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "data": "AA=="}}]}
        ],
    }
    path = tmp_path / "request.json"
    path.write_text(json.dumps({"request": anthropic}))
    code, rows = _cli(tmp_path, source=str(path), protocol="anthropic-messages")
    assert code == 0
    assert rows == [load_router(CONFIG).route(anthropic, "anthropic-messages")]
    assert rows[0]["facts"]["imageContentCount"] == 1 and rows[0]["model"] == "vision-model"


@pytest.mark.parametrize(("body", "field"), REFUSED[-2:])
def test_cli_single_file_refuses_what_http_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, field: str
) -> None:
    """A misspelt externalSignals and a numeric request.model are refused by the CLI too (exit 1), naming the
    field as the HTTP answer does."""
    path = tmp_path / "request.json"
    path.write_text(body)
    code, rows = _cli(tmp_path, source=str(path))
    assert code == 1 and rows == []
    assert capsys.readouterr().err.startswith(f"agent-signal route: {field}")


def test_the_route_body_model_lists_the_checked_fields() -> None:
    """The OpenAPI model of POST /v1/route has exactly the keys the shared check accepts."""
    from policies.routing import ROUTE_REQUEST_FIELDS

    assert tuple(RouteRequest.model_fields) == ROUTE_REQUEST_FIELDS


@pytest.mark.parametrize(
    ("body", "protocol"),
    [
        ('{"requets": {"messages": [{"role": "user", "content": "urgent"}]}}', "openai-chat"),
        ("{}", "openai-chat"),
        ('{"messages": [{"role": "user", "content": "hi"}]}', "openai-responses"),
    ],
)
def test_cli_single_file_refuses_an_object_that_is_no_chat_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, protocol: str
) -> None:
    """A newcomer's audit: a mistyped envelope (or ``{}``) was routed as a request with no messages and answered
    the fallback decision, exit 0; the door refuses ``{}`` naming ``request``. Now so does the CLI."""
    path = tmp_path / "request.json"
    path.write_text(body)
    code, rows = _cli(tmp_path, source=str(path), protocol=protocol)
    assert code == 1 and rows == []
    assert capsys.readouterr().err.startswith("agent-signal route: request: is required")


def test_cli_refuses_two_inputs_and_keeps_stdout_for_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An audit: REQUEST with --batch routed the batch and dropped REQUEST without a word, --check with a REQUEST
    ignored it, and a config that could not be read was printed on stdout, among the RouteResults. Now two inputs
    are exit 2 naming them, and a config's errors go to stderr (on stdout only for --check, which prints them)."""
    request = tmp_path / "req.json"
    request.write_text(json.dumps({"request": HI}))
    assert run_route(str(CONFIG), str(request), batch=str(request), check=False, protocol="openai-chat") == 2
    assert run_route(str(CONFIG), str(request), batch=None, check=True, protocol="openai-chat") == 2
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [
        "agent-signal route: REQUEST and --batch: give one input, or --check alone",
        "agent-signal route: REQUEST: give one input, or --check alone",
    ]
    missing = str(tmp_path / "nope.yaml")
    assert run_route(missing, str(request), batch=None, check=False, protocol="openai-chat") == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"agent-signal route: cannot read {missing}")
    checked = io.StringIO()  # run_route's default stdout is the one of its import
    assert run_route(missing, None, batch=None, check=True, protocol="openai-chat", out=checked) == 2
    assert checked.getvalue().startswith(f"cannot read {missing}")
