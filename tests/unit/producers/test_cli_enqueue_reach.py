"""Where ``agent-signal enqueue`` (and every verb that resolves a target) sends its work, and what it says when the
far end fails it (producers/cli/reach/target.py, producers/cli/enqueue/): a ``--token`` with no HTTP target is
refused (it wrote straight to Redis as the operator); a URL with a password is refused unquoted; a request
without an answer in time says so and names the lines that may be stored; a success that is not the API's is one
line saying so; and the summary, compact as CONTRACT.md writes it, is stdout's last line whatever happened.
The doors here are stub HTTP servers in a thread."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis import Redis

from producers.cli.enqueue import senders
from producers.cli.main import main
from producers.cli.reach.target import unreachable
from worker.settings import settings_environment

GOOD = '{"sourceType":"bot.message.merged","sourceId":"%s","payload":{"topicId":"t1","message":"hi"}}'
NAMES = (
    "AGENT_SIGNAL_URL",
    "AGENT_SIGNAL_TOKEN",
    "AGENT_SIGNAL_API_TOKEN",
    "REDIS_URL",
    "AGENT_SIGNAL_REDIS_URL",
)
TOKEN = "as_user_token_0123456789"
PASSWORD = "s3cret-pw"
ZERO = '{"accepted":0,"duplicate":0,"rejected":0}'


@pytest.fixture(autouse=True)
def second_terminal(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No URL, credential or Redis from this environment, and a working directory with no stack file."""
    for name in NAMES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def two_lines(tmp_path: Path) -> Path:
    path = tmp_path / "two.jsonl"
    path.write_text(GOOD % "reach-1" + "\n" + GOOD % "reach-2" + "\n")
    return path


def _out(capsys: pytest.CaptureFixture[str]) -> tuple[list[str], list[str]]:
    """(stdout lines, stderr lines), asserted free of a traceback."""
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err, captured.err
    return captured.out.splitlines(), captured.err.splitlines()


class TestTokenWithoutHttp:
    @pytest.mark.parametrize(
        "argv",
        [["enqueue", "FILE"], ["status", "evt_x"], ["inspect", "chain_x"], ["dlq", "list"], ["keys", "list"]],
        ids=["enqueue", "status", "inspect", "dlq list", "keys list"],
    )
    @pytest.mark.parametrize("source", ["--token", "AGENT_SIGNAL_TOKEN"])
    def test_a_token_straight_to_redis_is_refused(
        self,
        argv: list[str],
        source: str,
        make_settings: Any,
        redis_client: Redis,
        prefix: str,
        two_lines: Path,
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """REDIS_URL set, no --url and no stack: a user's token meant the HTTP API; acting as the operator of
        tenant ``default`` instead (the events stored unstamped, exit 0) is refused: one line, exit 2, nothing
        written."""
        for name, value in settings_environment(make_settings()).items():
            monkeypatch.setenv(name, value)
        argv = [str(two_lines) if arg == "FILE" else arg for arg in argv]
        if source == "--token":
            argv += ["--token", TOKEN]
        else:
            monkeypatch.setenv("AGENT_SIGNAL_TOKEN", TOKEN)
        assert main(argv) == 2
        out, err = _out(capsys)
        verb = " ".join(a for a in argv[:2] if not a.startswith(("/", "evt_", "chain_")))
        assert err == [
            f"agent-signal {verb}: {source} is for the HTTP API: give --url URL (or AGENT_SIGNAL_URL); straight to "
            f"REDIS_URL there is no credential (the verb acts as the operator of --tenant), so drop {source} for that"
        ]
        assert out == [] and list(redis_client.scan_iter(match=f"{prefix}*")) == []


def test_a_url_with_a_password_is_refused_unprinted(
    two_lines: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--url http://user:pw@host``: one line naming --url, exit 2, never the password."""
    assert main(["enqueue", str(two_lines), "--url", f"http://user:{PASSWORD}@127.0.0.1:9"]) == 2
    _, err = _out(capsys)
    assert err == [
        "agent-signal enqueue: --url holds a user name or password; give the credential as --token "
        "(the URL is not shown)"
    ]


Behave = Callable[[BaseHTTPRequestHandler, list[dict[str, Any]]], None]


class _Stub(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, behave: Behave) -> None:
        super().__init__(("127.0.0.1", 0), _StubHandler)
        self.behave = behave
        self.stop = threading.Event()


class _StubHandler(BaseHTTPRequestHandler):
    """``POST /v1/events``: the events sent go to the stub's ``behave``, which answers."""

    server: _Stub
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.behave(self, body.get("events", [body]))

    def log_message(self, *args: Any) -> None:
        pass


def _answer(
    handler: BaseHTTPRequestHandler, status: int, body: bytes, kind: str = "application/json"
) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", kind)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


@pytest.fixture
def stub() -> Iterator[Callable[[Behave], str]]:
    servers: list[_Stub] = []

    def start(behave: Behave) -> str:
        server = _Stub(behave)
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.stop.set()
        server.shutdown()
        server.server_close()


def _results(events: list[dict[str, Any]], *statuses: str) -> bytes:
    rows = [
        {"eventId": f"evt_{i}", "sourceId": e["sourceId"], "status": s}
        for i, (e, s) in enumerate(zip(events, statuses, strict=True))
    ]
    return json.dumps({"results": rows}).encode()


@pytest.mark.timeout(60)
def test_a_door_that_does_not_answer_in_time_says_so_and_names_the_lines(
    stub: Callable[[Behave], str],
    two_lines: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The batch was read by a door that never answers: not "cannot reach …; is the stack running?" but no answer
    within the timeout, and the lines of the batch that may be stored; the summary is last, exit 2."""
    monkeypatch.setattr(senders, "HTTP_TIMEOUT_S", 1.0)

    def stall(handler: BaseHTTPRequestHandler, events: list[dict[str, Any]]) -> None:
        handler.server.stop.wait()  # type: ignore[attr-defined]  # until the test ends

    url = stub(stall)
    assert main(["enqueue", str(two_lines), "--url", url]) == 2
    out, err = _out(capsys)
    assert err == [
        f"agent-signal enqueue: no answer from {url} within 1 s; lines 1-2 may be stored "
        "(a rerun counts them as duplicates)"
    ]
    assert out == [ZERO]


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (200, b'{"ok":true}', "application/json"),
        (202, b"<html>accepted</html>", "text/html"),
        (202, b"ONE", "application/json"),  # replaced below by one result for two events
    ],
    ids=["no results", "not json", "too few results"],
)
def test_a_success_that_is_not_the_api_is_one_line_then_the_summary(
    status: int,
    body: bytes,
    kind: str,
    stub: Callable[[Behave], str],
    two_lines: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A 200 ``{"ok":true}`` was a KeyError traceback, a page a JSONDecodeError without the summary, one result
    for two events a zip ValueError: now one line saying it is not the API, the summary last, exit 2."""

    def answer(handler: BaseHTTPRequestHandler, events: list[dict[str, Any]]) -> None:
        _answer(handler, status, _results(events[:1], "accepted") if body == b"ONE" else body, kind)

    url = stub(answer)
    assert main(["enqueue", str(two_lines), "--url", url]) == 2
    out, err = _out(capsys)
    assert len(err) == 1 and err[0].startswith(
        f"agent-signal enqueue: {url} is not the Agent Signal API: POST /v1/events answered {status} without "
    )
    assert err[0].endswith("; lines 1-2 may be stored (a rerun counts them as duplicates)")
    assert out == [ZERO]


def test_the_summary_is_compact_as_the_contract_writes_it(
    stub: Callable[[Behave], str], two_lines: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``{"accepted":n,"duplicate":n,"rejected":n}`` without spaces (CONTRACT.md); an admission hook's status
    (``gated``) is counted under its own key, after those three."""
    url = stub(lambda handler, events: _answer(handler, 202, _results(events, "accepted", "gated")))
    assert main(["enqueue", str(two_lines), "--url", url]) == 0
    out, _ = _out(capsys)
    assert out == ['{"accepted":1,"duplicate":0,"rejected":0,"gated":1}']


def test_a_console_request_timed_out_is_no_answer_not_unreachable() -> None:
    """The console's client (target.Api) words a timeout after sending as the enqueue verb does; a refused
    connection keeps the hint to start the stack."""
    timed_out = unreachable("http://127.0.0.1:9", httpx.ReadTimeout("timed out"), timeout_s=30)
    assert (str(timed_out), timed_out.exit_code, timed_out.maybe_stored) == (
        "no answer from http://127.0.0.1:9 within 30 s",
        2,
        True,
    )
    refused = unreachable("http://127.0.0.1:9", httpx.ConnectError("[Errno 111] Connection refused"))
    assert (
        str(refused)
        == "cannot reach http://127.0.0.1:9 (connection refused); is the stack running? (make run)"
    )
    assert not refused.maybe_stored


def test_a_read_that_fails_partway_sends_what_was_read_and_names_the_line() -> None:
    """A review: an OSError partway through the file lost the batch being read (up to --batch - 1 lines read and
    never sent), and the message named no line to resume from."""
    import argparse

    from producers.cli.enqueue.command import Progress, Tally, _readable, _send_all
    from producers.cli.enqueue.lines import Line
    from producers.cli.reach.target import CliError
    from worker.intake.source_event import EnqueueResult

    class Sender:
        sent: list[int] = []

        def send(self, chunk: list[tuple[int, dict[str, Any]]]) -> list[Any]:
            Sender.sent += [number for number, _ in chunk]
            return [
                (n, EnqueueResult(event_id=f"e{n}", source_id=f"s{n}", status="accepted"), None)
                for n, _ in chunk
            ]

    def lines() -> Iterator[Line]:
        for number in range(1, 8):
            yield Line(number, {"sourceId": f"s{number}"}, None)
        raise OSError(5, "Input/output error")

    tally = Tally()
    args = argparse.Namespace(batch=5, ids=False, file="events.jsonl")
    with pytest.raises(CliError, match=r"cannot read events.jsonl after line 7: Input/output error"):
        _send_all(Sender(), _readable(lines()), args, tally, Progress(None))  # type: ignore[arg-type]
    assert Sender.sent == [1, 2, 3, 4, 5, 6, 7] and tally.summary["accepted"] == 7 and tally.last_line == 7


def test_a_read_that_fails_before_any_line_or_with_the_send_says_both() -> None:
    """A review: a read error before any line said "after line 0", and one whose last batch then failed to send
    was not said at all."""
    import argparse

    from producers.cli.enqueue.command import Progress, Tally, _readable, _send_all
    from producers.cli.enqueue.lines import Line
    from producers.cli.reach.target import CliError

    class Refusing:
        def send(self, chunk: list[tuple[int, dict[str, Any]]]) -> list[Any]:
            raise CliError("cannot reach http://x (connection refused)")

    def failing(count: int) -> Iterator[Line]:
        for number in range(1, count + 1):
            yield Line(number, {"sourceId": f"s{number}"}, None)
        raise OSError(5, "Input/output error")

    args = argparse.Namespace(batch=5, ids=False, file="f.jsonl")
    with pytest.raises(CliError, match=r"^cannot read f.jsonl before any line was read: Input/output error$"):
        _send_all(Refusing(), _readable(failing(0)), args, Tally(), Progress(None))  # type: ignore[arg-type]
    with pytest.raises(CliError, match=r"connection refused\); and cannot read f.jsonl after line 3: Input"):
        _send_all(Refusing(), _readable(failing(3)), args, Tally(), Progress(None))  # type: ignore[arg-type]
