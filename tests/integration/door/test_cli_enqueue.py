"""`agent-signal enqueue` on input a user should not have sent: every bad line is a rejection naming its line
(and field), the other lines are sent, the summary is printed last, and nothing ends in a traceback, the same
straight to Redis (``REDIS_URL``) as over HTTP (``--url``). Over HTTP a batch the server finds too large is
split until it fits (producers/cli/enqueue.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from producers.cli.enqueue.lines import Line, Rejection, parse_line
from tests.conftest import settings_env

pytestmark = pytest.mark.integration

GOOD = '{"sourceType":"bot.message.merged","sourceId":"%s","payload":{"topicId":"t1","message":"hi"}}'
EVENT = '{"sourceType":"bot.message.merged","sourceId":"%s","payload":{"topicId":"t1",%s}}'

Run = Callable[..., subprocess.CompletedProcess[str]]


def _cli(settings: Any, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI on the test's Redis, run outside any checkout (no stack file of this one is picked up)."""
    return subprocess.run(
        [sys.executable, "-m", "producers.cli", *args],
        cwd="/",
        env=settings_env(settings),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _summary(result: subprocess.CompletedProcess[str]) -> dict[str, int]:
    """The last stdout line, asserted to come after a run without a traceback."""
    assert "Traceback" not in result.stderr, result.stderr
    summary: dict[str, int] = json.loads(result.stdout.strip().splitlines()[-1])
    return summary


@pytest.fixture(params=["redis", "http"])
def enqueue(request: pytest.FixtureRequest, make_settings: Any, serve_web: Any) -> Run:
    """``agent-signal enqueue FILE [ARGS]``: straight to Redis, or with ``--url`` to the web app served over HTTP."""
    settings = make_settings(api_token="tok")
    if request.param == "redis":
        return lambda path, *args: _cli(settings, "enqueue", str(path), *args)
    _, url = serve_web(settings)
    return lambda path, *args: _cli(settings, "enqueue", str(path), "--url", url, *args)


# (the bad line, what its rejection says after its line number): all of them in one file, each between good
# lines, so that one run per transport (a CLI process, and a web process over HTTP) checks every case
BAD_LINES = {
    "array": (b"[1, 2]", "an event must be a JSON object, not an array"),
    "number": (b"5", "an event must be a JSON object, not a number"),
    "null": (b"null", "an event must be a JSON object, not null"),
    "string": (b'"s"', "an event must be a JSON object, not a string"),
    "nan": (
        (EVENT % ("n1", '"score":NaN')).encode(),
        "payload.score is NaN: JSON numbers must be finite (no NaN or Infinity) (field: payload.score)",
    ),
    "infinity": (
        (EVENT % ("n2", '"deep":{"x":[1,-Infinity]}')).encode(),
        "payload.deep.x.1 is -Infinity: JSON numbers must be finite (no NaN or Infinity) "
        "(field: payload.deep.x.1)",
    ),
    "lone surrogate": (
        (EVENT % ("s1", '"message":"\\ud800"')).encode(),
        "payload.message holds a lone surrogate (\\ud800-\\udfff without its pair): not text "
        "(field: payload.message)",
    ),
    "not utf-8": (
        (EVENT % ("u1", '"message":"caf\xe9"')).encode("latin-1"),
        "not UTF-8 (byte 0xe9 at column 92)",
    ),
    "too deep": (b"[" * 5000 + b"]" * 5000, "nested deeper than 62 levels"),
    # 63 levels with the event's own: a batch over HTTP ({"events": [...]}) would be 65, past the door's 64
    "deep payload": (
        (EVENT % ("d1", '"n":' + "[" * 61 + "]" * 61)).encode(),
        "nested deeper than 62 levels (field: payload)",
    ),
}


class TestBadLines:
    def test_each_bad_line_is_rejected_naming_it_and_the_rest_is_sent(
        self, enqueue: Run, tmp_path: Path
    ) -> None:
        """A line that is not a JSON object, not strict JSON (NaN, Infinity, a lone surrogate), not UTF-8 or
        nested past the limit is rejected naming its line (and field); the good lines around it are sent; exit 1."""
        lines = [(GOOD % "g0").encode()]
        expected = []
        for i, (line, message) in enumerate(BAD_LINES.values()):
            lines.append(line)
            expected.append(f"line {len(lines)}: {message}")
            lines.append((GOOD % f"g{i + 1}").encode())
        path = tmp_path / "events.jsonl"
        path.write_bytes(b"\n".join(lines) + b"\n")

        result = enqueue(path)

        good = len(BAD_LINES) + 1
        assert _summary(result) == {"accepted": good, "duplicate": 0, "rejected": len(BAD_LINES)}
        assert result.returncode == 1
        for case, message in zip(BAD_LINES, expected, strict=True):
            assert message + "\n" in result.stderr, (
                case,
                result.stderr,
            )  # the whole line: no field left over

    def test_a_bad_line_on_stdin_is_rejected_alone(self, make_settings: Any) -> None:
        """'-' reads stdin per line too: a line that is not UTF-8 is rejected, the others are sent."""
        settings = make_settings()
        data = (GOOD % "i1").encode() + b"\n\xff\xfe\n" + (GOOD % "i2").encode() + b"\n"
        result = subprocess.run(
            [sys.executable, "-m", "producers.cli", "enqueue", "-"],
            cwd="/",
            env=settings_env(settings),
            input=data,
            capture_output=True,
            timeout=120,
        )
        assert result.returncode == 1, result.stderr
        assert json.loads(result.stdout.decode().splitlines()[-1]) == {
            "accepted": 2,
            "duplicate": 0,
            "rejected": 1,
        }
        assert "line 2: not UTF-8 (byte 0xff at column 1)" in result.stderr.decode()


class TestBatchOption:
    @pytest.mark.parametrize("value", ["0", "-1", "x"])
    def test_batch_must_be_a_positive_integer(self, make_settings: Any, tmp_path: Path, value: str) -> None:
        """--batch 0, -1 or x is a usage error naming --batch (exit 2), before anything is sent."""
        path = tmp_path / "e.jsonl"
        path.write_text(GOOD % "b1" + "\n")
        result = _cli(make_settings(), "enqueue", str(path), "--batch", value)
        assert result.returncode == 2
        assert result.stdout == ""
        assert "argument --batch: must be a positive integer" in result.stderr
        assert "Traceback" not in result.stderr


class TestTooLargeOverHttp:
    def test_a_batch_over_the_body_limit_is_split(
        self, make_settings: Any, serve_web: Any, tmp_path: Path
    ) -> None:
        """A batch whose body the server refuses (413) is halved until it fits; a single event still too large
        is rejected naming its line with the server's message; everything else is accepted."""
        settings = make_settings(api_token="tok", max_request_bytes=4096)
        _, url = serve_web(settings)
        filler = '"message":"%s"' % ("x" * 300)
        lines = [EVENT % (f"big{i}", filler) for i in range(30)]
        lines.insert(7, EVENT % ("huge", '"message":"%s"' % ("y" * 5000)))
        path = tmp_path / "e.jsonl"
        path.write_text("\n".join(lines) + "\n")

        result = _cli(settings, "enqueue", str(path), "--url", url, "--ids")

        assert _summary(result) == {"accepted": 30, "duplicate": 0, "rejected": 1}
        assert result.returncode == 1
        rows = [json.loads(line) for line in result.stdout.strip().splitlines()[:-1]]
        assert [r["line"] for r in rows] == [n for n in range(1, 32) if n != 8]
        assert "line 8: HTTP 413 request_too_large: request body is" in result.stderr
        assert "the limit is 4096\n" in result.stderr  # the line as a whole: no field named


class TestLimits:
    def test_a_limit_stops_the_run_with_one_line_and_the_summary(
        self, make_settings: Any, serve_web: Any, tmp_path: Path
    ) -> None:
        """A scope's inbox limit refuses its third event: one line naming the limit and the summary of what was
        sent, exit 1, straight to Redis as over HTTP (its 429)."""
        settings = make_settings(api_token="tok", max_inbox_depth=2)
        url = serve_web(settings)[1]
        for topic, extra, said in (
            ("direct", [], "over a limit (inbox)"),
            ("http", ["--url", url], "HTTP 429 inbox_full"),
        ):
            path = tmp_path / f"{topic}.jsonl"
            event = '{"sourceType":"bot.message.merged","sourceId":"%s","payload":{"topicId":"%s"}}'
            path.write_text("\n".join(event % (f"{topic}{i}", topic) for i in range(5)) + "\n")
            result = _cli(settings, "enqueue", str(path), "--batch", "1", *extra)
            assert _summary(result) == {"accepted": 2, "duplicate": 0, "rejected": 0}
            assert result.returncode == 1
            assert result.stderr.strip() == (
                f"agent-signal enqueue: {said}: scope 'topic:{topic}' already holds 2 queued events (limit 2); "
                "retry later"
            )

    def test_a_batch_stopped_by_a_limit_still_reports_its_rejected_line(
        self, make_settings: Any, serve_web: Any, tmp_path: Path
    ) -> None:
        """A batch with an invalid line that a limit then stops: the line's rejection is printed and counted
        before the limit's line (it was lost with the batch's other outcomes), on both paths."""
        settings = make_settings(api_token="tok", max_inbox_depth=2)
        url = serve_web(settings)[1]
        for topic, extra in (("direct2", []), ("http2", ["--url", url])):
            path = tmp_path / f"{topic}.jsonl"
            event = '{"sourceType":"bot.message.merged","sourceId":"%s","payload":{"topicId":"%s"}}'
            lines = [event % (f"{topic}{i}", topic) for i in range(4)]
            lines.insert(1, '{"sourceId":"no-type","payload":{}}')
            path.write_text("\n".join(lines) + "\n")
            result = _cli(settings, "enqueue", str(path), *extra)
            assert result.returncode == 1, result.stderr
            assert _summary(result) == {"accepted": 0, "duplicate": 0, "rejected": 1}, result.stderr
            said = result.stderr.strip().splitlines()
            assert said[0].startswith("line 2: ") and "sourceType" in said[0], said
            assert said[-1].startswith("agent-signal enqueue: ") and "limit 2" in said[-1], said


class TestParseLine:
    """The line checks on their own (no Redis, no server)."""

    def test_text_file_conventions_are_kept(self) -> None:
        """A BOM before the first line, CRLF endings and blank lines (Unicode spaces too) are not errors."""
        assert parse_line(1, b'\xef\xbb\xbf{"a":1}', 62) == Line(1, {"a": 1}, None)
        assert parse_line(2, b'{"a":1}\r', 62) == Line(2, {"a": 1}, None)
        assert parse_line(3, b" \t", 62) is None
        assert parse_line(4, "\u3000".encode(), 62) is None
        assert parse_line(1, b"\xef\xbb\xbf", 62) is None  # an empty file saved with a byte order mark

    def test_brackets_that_never_close_are_not_a_recursion_error(self) -> None:
        """Thousands of unclosed brackets (which the depth check cannot pair) are a plain rejection."""
        assert parse_line(5, b"[" * 5000, 62) == Line(
            5, None, Rejection("not valid JSON (nested deeper than 62 levels)")
        )


def test_lines_are_sent_as_they_are_read(make_settings: Any, redis_client: Any, keys: Any) -> None:
    """An SDK audit: ``enqueue`` read its whole file before sending a line (a 50 MB file took 496 MB, a larger one
    the machine's memory). Now it sends each batch once it is read: the first line fed through stdin is stored
    while stdin is still open."""
    from tests.conftest import wait_for

    settings = make_settings()
    proc = subprocess.Popen(
        [sys.executable, "-m", "producers.cli", "enqueue", "-", "--batch", "1", "--ids"],
        cwd="/",
        env=settings_env(settings),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        first = {
            "sourceType": "test.timeline",
            "sourceId": "streamed-1",
            "scopeKey": "topic:streamed",
            "payload": {},
        }
        proc.stdin.write(json.dumps(first) + "\n")
        proc.stdin.flush()
        stored = json.loads(proc.stdout.readline())  # --ids: its line comes once its batch is answered
        assert stored["sourceId"] == "streamed-1" and stored["status"] == "accepted"
        wait_for(
            lambda: redis_client.llen(keys.inbox("topic:streamed")) == 1, timeout_s=30, what="the first line"
        )
        second = {**first, "sourceId": "streamed-2"}
        out, err = proc.communicate(json.dumps(second) + "\n", timeout=60)  # and stdin closes
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1]) == {"accepted": 2, "duplicate": 0, "rejected": 0}


def test_a_source_type_the_door_refused_is_rejected_here_for_its_other_lines(
    make_settings: Any, start_web: Any, tmp_path: Path
) -> None:
    """An audit: a file whose lines all carried a mistyped sourceType cost one POST per line (2,000 lines, 2,015
    requests, 20 s). The door's answer depends on the type alone, so once it refuses a type as unknown the CLI
    rejects that type's other lines itself, with the same message; the good lines are sent."""
    settings = make_settings(api_token="tok")
    web, url = start_web(settings)  # the process: its access log counts the requests
    typo = '{"sourceType":"app.typo","sourceId":"t%d","payload":{}}'
    lines = [typo % n if n % 30 else GOOD % f"ok{n}" for n in range(300)]
    path = tmp_path / "typo.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result = _cli(settings, "enqueue", str(path), "--url", url)
    assert _summary(result) == {"accepted": 10, "duplicate": 0, "rejected": 290}
    rejected = [line for line in result.stderr.splitlines() if "unknown source type 'app.typo'" in line]
    assert len(rejected) == 290 and rejected[0].startswith("line 2: sourceType: unknown source type"), (
        rejected[:2]
    )
    posts = web.log().count("POST /v1/events")
    assert posts <= 10, f"{posts} requests for 300 lines"  # before: one per rejected line (290 and more)
