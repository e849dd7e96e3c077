"""What the CLI refuses before it acts, and how it ends (producers/cli/main.py, target.py, inspection.py): one
line on stderr and exit 2 for a mistyped ``--url``, a credential a header cannot carry (never printing it), ids
given with ``--all``, a ``dlq list`` page out of the HTTP route's bounds; quietly, exit 141, when stdout's reader
went away."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from producers import Producer
from producers.cli import inspection
from producers.cli.main import SIGPIPE_EXIT, main
from producers.cli.reach.target import transport_reason
from producers.http.routes import ops
from tests.conftest import ROOT
from worker.runtime.app import build_pipeline
from worker.settings import settings_environment
from worker.telemetry.recorder import DISABLED

SECRET = "as_secret_" + "k" * 24
NAMES = (
    "AGENT_SIGNAL_URL",
    "AGENT_SIGNAL_TOKEN",
    "AGENT_SIGNAL_API_TOKEN",
    "REDIS_URL",
    "AGENT_SIGNAL_REDIS_URL",
)


@pytest.fixture(autouse=True)
def second_terminal(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No URL, credential or Redis from this environment, and a working directory with no stack file."""
    for name in NAMES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def direct(make_settings: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Straight to the test's Redis (``REDIS_URL`` and the test's key prefix), with one dead event."""
    settings = make_settings(max_attempts=1)
    for name, value in settings_environment(settings).items():
        monkeypatch.setenv(name, value)
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=DISABLED, app=producer.app)
    event = {"sourceType": "test.flaky", "sourceId": "dead-1", "scopeKey": "topic:cli-guards", "payload": {}}
    dead = producer.enqueue(event)
    assert pipeline.drain_scope("topic:cli-guards").next == "idle"
    yield producer, dead.event_id
    producer.close()
    pipeline.store.client.close()


def _status(producer: Producer, event_id: str) -> str:
    record = producer.status(event_id)
    assert record is not None
    return str(record["status"])


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err.strip()


class _Door(BaseHTTPRequestHandler):
    """``GET /v1/dlq`` answering an empty page; keeps each request's Authorization header."""

    seen: list[str | None] = []

    def do_GET(self) -> None:
        self.seen.append(self.headers.get("Authorization"))
        body = json.dumps({"events": [], "total": 0}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def door() -> Iterator[str]:
    """A listening HTTP server (a refused connection would fail before any header is sent); its URL."""
    _Door.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Door)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


class TestRedrive:
    def test_ids_with_all_are_refused(self, direct: Any, capsys: pytest.CaptureFixture[str]) -> None:
        """``dlq redrive ID --all`` is a usage error (exit 2), as for discard: the dead event stays dead."""
        producer, event_id = direct
        assert main(["dlq", "redrive", "evt_other", "--all"]) == 2
        assert _one_line(capsys) == "agent-signal dlq redrive: give event ids or --all (not both)"
        assert _status(producer, event_id) == "dead"
        assert main(["dlq", "redrive", event_id, event_id, "--json"]) == 0
        assert json.loads(capsys.readouterr().out) == {"redriven": [event_id], "notDead": []}

    def test_a_bad_id_names_its_place_once(self, direct: Any, capsys: pytest.CaptureFixture[str]) -> None:
        """An id no event can have is one line naming its place once (it read ``eventIds[0]: eventIds[0] …``)."""
        assert main(["dlq", "redrive", "a b"]) == 2
        assert _one_line(capsys) == (
            "agent-signal dlq redrive: InvalidEvent: eventIds[0] must not contain ' ' "
            "(allowed: letters, digits and _ . : @ / + = - #)"
        )

    def test_a_table_as_for_discard(self, direct: Any, capsys: pytest.CaptureFixture[str]) -> None:
        """Straight to Redis as over HTTP: without ``--json`` a row per id, redriven or not dead (exit 1)."""
        _, event_id = direct
        assert main(["dlq", "redrive", event_id, "evt_other"]) == 1
        assert capsys.readouterr().out == (
            f"EVENT ID\tRESULT\n{event_id}\tredriven\nevt_other\tnot dead: left as it is\n"
        )


class TestDlqListBounds:
    @pytest.mark.parametrize(
        ("flags", "message"),
        [
            (["--limit", "0"], "argument --limit: 0 is not in 1..500"),
            (["--limit", "-1"], "argument --limit: -1 is not in 1..500"),
            (["--limit", "501"], "argument --limit: 501 is not in 1..500"),
            (["--offset", "-1"], "argument --offset: -1 is not in 0..1000000"),
            (["--limit", "ten"], "argument --limit: 'ten' is not a whole number"),
        ],
    )
    def test_out_of_bounds_is_a_usage_error(
        self, direct: Any, flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Straight to Redis, --limit and --offset take the HTTP route's bounds (else argparse's exit 2)."""
        with pytest.raises(SystemExit) as exited:
            main(["dlq", "list", "--json", *flags])
        assert exited.value.code == 2
        out, err = capsys.readouterr()
        assert out == "" and err.strip().endswith(message)

    def test_in_bounds_pages(self, direct: Any, capsys: pytest.CaptureFixture[str]) -> None:
        """A page within the bounds lists as before; an offset past the end is an empty page."""
        _, event_id = direct
        assert main(["dlq", "list", "--json", "--limit", "1"]) == 0
        page = json.loads(capsys.readouterr().out)
        assert [e["eventId"] for e in page["events"]] == [event_id] and page["total"] == 1
        assert main(["dlq", "list", "--json", "--offset", "1"]) == 0
        assert json.loads(capsys.readouterr().out)["events"] == []

    def test_a_cursor_continues_after_its_page_and_does_not_go_with_an_offset(
        self, direct: Any, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Two dead events, a page of one: the page prints its cursor (on stderr too), and ``--cursor`` lists
        the other; with ``--offset`` as well it is a usage error."""
        producer, first = direct
        event = {
            "sourceType": "test.flaky",
            "sourceId": "dead-2",
            "scopeKey": "topic:cli-guards-2",
            "payload": {},
        }
        second = producer.enqueue(event).event_id
        build_pipeline(producer.settings, telemetry=DISABLED, app=producer.app).drain_scope(
            "topic:cli-guards-2"
        )
        assert main(["dlq", "list", "--json", "--limit", "1"]) == 0
        out, err = capsys.readouterr()
        page = json.loads(out)
        assert [e["eventId"] for e in page["events"]] == [
            second
        ] and err.strip() == f"more follow: --cursor {page['cursor']}"
        assert main(["dlq", "list", "--json", "--limit", "1", "--cursor", page["cursor"]]) == 0
        rest = json.loads(capsys.readouterr().out)
        assert [e["eventId"] for e in rest["events"]] == [first] and "cursor" not in rest
        assert main(["dlq", "list", "--cursor", page["cursor"], "--offset", "1"]) == 2
        assert "not both" in _one_line(capsys)

    def test_bounds_are_the_routes(self) -> None:
        """The CLI's bounds are GET /v1/dlq's."""
        assert (inspection.MAX_DLQ_OFFSET, inspection.MAX_DLQ_LIMIT) == (
            ops.MAX_DLQ_OFFSET,
            ops.MAX_DLQ_LIMIT,
        )


class TestUrl:
    def test_a_mistyped_url_names_the_flag(self, capsys: pytest.CaptureFixture[str]) -> None:
        """``--url http://localhost:800o`` is one line naming --url, exit 2; no traceback."""
        assert main(["dlq", "list", "--url", "http://localhost:800o"]) == 2
        line = _one_line(capsys)
        assert line == (
            "agent-signal dlq list: --url is not a valid URL (Invalid port: '800o'); give http://HOST:PORT"
        )

    def test_a_mistyped_environment_url_names_the_variable(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The same from AGENT_SIGNAL_URL, and for a URL without http:// (``localhost:8000``)."""
        monkeypatch.setenv("AGENT_SIGNAL_URL", "http://localhost:800o")
        assert main(["status", "evt_x"]) == 2
        assert _one_line(capsys).startswith("agent-signal status: AGENT_SIGNAL_URL is not a valid URL")
        monkeypatch.setenv("AGENT_SIGNAL_URL", "localhost:8000")
        assert main(["runs", "list"]) == 2
        assert _one_line(capsys).startswith(
            "agent-signal runs list: AGENT_SIGNAL_URL must be an http:// or https:// URL"
        )


class TestCredential:
    def test_a_trailing_cr_is_dropped(
        self, door: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """``AGENT_SIGNAL_TOKEN="$(cat key.txt)"`` of a CRLF file: the key is sent without its CR, and works."""
        monkeypatch.setenv("AGENT_SIGNAL_TOKEN", SECRET + "\r")
        assert main(["dlq", "list", "--json", "--url", door]) == 0, capsys.readouterr().err
        assert _Door.seen == [f"Bearer {SECRET}"]
        assert SECRET not in capsys.readouterr().err

    @pytest.mark.parametrize(
        "bad", [SECRET[:10] + "\r" + SECRET[10:], SECRET[:10] + " " + SECRET[10:], "as_é_key"]
    )
    def test_a_credential_a_header_cannot_carry_is_refused_unprinted(
        self, bad: str, door: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A space, control character or non-ASCII inside: one line naming --token, exit 2, nothing sent."""
        assert main(["dlq", "list", "--url", door, "--token", bad]) == 2
        line = _one_line(capsys)
        assert line.startswith("agent-signal dlq list: --token holds a space, a control character")
        assert bad.strip() not in line and "as_" not in line
        assert _Door.seen == []

    def test_a_refused_request_never_quotes_its_headers(self) -> None:
        """httpx's LocalProtocolError quotes the header it refused: the reason given leaves it out."""
        exc = httpx.LocalProtocolError(f"Illegal header value b'Bearer {SECRET}\\r'")
        assert SECRET not in transport_reason(exc)


class TestBrokenPipe:
    def test_a_reader_gone_ends_quietly(self, tmp_path: Path) -> None:
        """``agent-signal … | head -1``: no BrokenPipeError on stderr, exit 141 (a shell's for SIGPIPE)."""
        script = tmp_path / "steps.jsonl"
        script.write_text('{"turn": {"userMessaged": false}}\n' * 5000)  # far more than a pipe holds
        functions = ROOT / "examples" / "functions"
        command = ["functions", "simulate", "--functions", str(functions), "--script", str(script)]
        proc = subprocess.Popen(
            [sys.executable, "-m", "producers.cli", *command],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdout is not None and proc.stderr is not None
        assert json.loads(proc.stdout.readline())["step"] == 0
        proc.stdout.close()
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=60) == SIGPIPE_EXIT and err == ""


def test_a_misspelled_cli_variable_is_named_and_no_setting_is_taken_for_one(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A walk: ``AGENT_SIGNAL_TOKN=<key> agent-signal runs list`` sent no bearer and its 401 did not say why (a verb
    over HTTP loads no settings, so nothing refused the unknown name). Each verb now says which name it meant; no
    name the settings document is taken for a misspelling."""
    from producers.cli.main import misspelled_cli_names

    assert misspelled_cli_names({"AGENT_SIGNAL_TOKN": "k"}) == [
        "AGENT_SIGNAL_TOKN is set, AGENT_SIGNAL_TOKEN is not: did you mean AGENT_SIGNAL_TOKEN?"
    ]
    assert misspelled_cli_names({"AGENT_SIGNAL_TOKN": "k", "AGENT_SIGNAL_TOKEN": "k"}) == []
    documented = set(re.findall(r"AGENT_SIGNAL_[A-Z0-9_]+", (ROOT / "docs" / "settings.md").read_text()))
    assert len(documented) > 100
    assert (
        misspelled_cli_names(dict.fromkeys(documented - {"AGENT_SIGNAL_URL", "AGENT_SIGNAL_TOKEN"}, "x"))
        == []
    )
    monkeypatch.setenv("AGENT_SIGNAL_URI", "http://127.0.0.1:1")
    main(["runs", "list", "--url", "http://127.0.0.1:1"])
    assert "did you mean AGENT_SIGNAL_URL?" in capsys.readouterr().err


@pytest.mark.parametrize(
    "url", ["redis://127.0.0.1:6379/99", "redis://127.0.0.1:6379/0?socket_timeout=abc"], ids=["db", "option"]
)
def test_a_redis_url_redis_py_cannot_use_is_named(
    url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A walk: a database index past the server's, or an option redis-py cannot read, said only redis-py's words
    (``DB index is out of range``), naming no variable. The line names REDIS_URL now, exit 2."""
    monkeypatch.setenv("REDIS_URL", url)
    for name in ("AGENT_SIGNAL_URL", "AGENT_SIGNAL_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    assert main(["status", "evt_x"]) == 2
    err = capsys.readouterr().err
    assert err.rstrip().endswith("; check REDIS_URL") and "Traceback" not in err, err
