"""A state-changing verb stopped partway says how far it got (producers/cli/stopped.py): ``enqueue`` after Ctrl-C
(exit 130) or with its reader gone (``--ids | head -1``, exit 141) prints its summary so far and the last line
sent on stderr; ``dlq redrive --all`` straight to Redis goes a page at a time with the count on stderr, as over
HTTP, and says its count when interrupted; the count's total is the list's size when the first page was read.

Real Redis and a real ``agent-signal enqueue`` process; the SIGINT is sent once the process has printed its
first ``--ids`` line, and the process cannot have finished by then: its output (5,000 lines) is far more than
the pipe holds while the test reads nothing more.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from producers import Producer
from producers.cli.console import dead_letters
from producers.cli.main import SIGPIPE_EXIT, main
from producers.sdk import dead_letters as sdk_dead_letters
from tests.conftest import settings_env
from tests.support.drains import dead_by_drain
from worker.runtime.app import build_pipeline
from worker.settings import settings_environment
from worker.telemetry.recorder import DISABLED

pytestmark = pytest.mark.integration

GOOD = '{"sourceType":"bot.message.merged","sourceId":"%s","payload":{"topicId":"t1","message":"hi"}}'
LINES = 5000
STOPPED = re.compile(
    r"agent-signal enqueue: (?P<why>.+?) after line (?P<line>\d+), the last line sent: (?P<summary>\{.*?\})"
    r"(; lines \d+-\d+ were on their way and may be stored \(a rerun counts them as duplicates\))?"
)


@pytest.fixture
def events_file(tmp_path: Path) -> Path:
    path = tmp_path / "events.jsonl"
    path.write_text("".join(GOOD % f"stop-{i}" + "\n" for i in range(LINES)))
    return path


def _enqueue(settings: Any, path: Path, *, interruptible: bool = False) -> subprocess.Popen[bytes]:
    """``agent-signal enqueue PATH --batch 1 --ids`` straight to the test's Redis, stdout and stderr piped; with
    ``interruptible`` SIGINT is left at its default in the child (Python turns it into KeyboardInterrupt; a
    parent that ignores SIGINT would otherwise pass that on)."""

    def default_sigint() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    return subprocess.Popen(
        [sys.executable, "-m", "producers.cli", "enqueue", str(path), "--batch", "1", "--ids"],
        cwd="/",
        env=settings_env(settings),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # unbuffered: a test reads its first line, then communicate() reads the pipe's fd itself; a buffered
        # readline kept the lines it read ahead (a loaded machine: six), and communicate never saw them
        bufsize=0,
        preexec_fn=default_sigint if interruptible else None,
    )


class TestEnqueueStopped:
    def test_ctrl_c_prints_the_summary_and_the_last_line_sent(
        self, make_settings: Any, events_file: Path
    ) -> None:
        """SIGINT after the first event: exit 130, stderr names the last line sent with the summary so far, and
        the summary is stdout's last line, counting every ``--ids`` line printed."""
        proc = _enqueue(make_settings(), events_file, interruptible=True)
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert json.loads(first)["line"] == 1
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=120)

        assert proc.returncode == 130, err.decode()
        lines = (first + rest).decode().splitlines()
        ids, summary = [json.loads(line) for line in lines[:-1]], json.loads(lines[-1])
        # the interrupt may land between a line's count and its --ids line: the summary counts what was stored
        stored = summary["accepted"]
        assert stored in (len(ids), len(ids) + 1) and summary == {
            "accepted": stored,
            "duplicate": 0,
            "rejected": 0,
        }
        assert [row["line"] for row in ids] == list(range(1, len(ids) + 1)) and len(ids) < LINES
        said = STOPPED.fullmatch(err.decode().strip())
        assert said is not None, err.decode()
        assert said["why"] == "interrupted (Ctrl-C)"
        assert int(said["line"]) == stored and json.loads(said["summary"]) == summary

    def test_a_reader_gone_prints_the_summary_on_stderr(self, make_settings: Any, events_file: Path) -> None:
        """``--ids | head -1``: exit 141, and stderr (stdout is gone) names the last line sent and the summary."""
        proc = _enqueue(make_settings(), events_file)
        assert proc.stdout is not None and proc.stderr is not None
        assert json.loads(proc.stdout.readline())["line"] == 1
        proc.stdout.close()
        err = proc.stderr.read().decode()

        assert proc.wait(timeout=120) == SIGPIPE_EXIT, err
        said = STOPPED.fullmatch(err.strip())
        assert said is not None, err
        assert said["why"] == "stopped: stdout's reader went away"
        summary = json.loads(said["summary"])
        assert summary == {"accepted": int(said["line"]), "duplicate": 0, "rejected": 0}


@pytest.fixture
def five_dead(make_settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Producer, list[str]]]:
    """Five dead events straight in the test's Redis (``REDIS_URL`` and its key prefix in the environment), and
    the page of ``--all`` made 2, so that they take three pages."""
    settings = make_settings(max_attempts=1)
    for name, value in settings_environment(settings).items():
        monkeypatch.setenv(name, value)
    for name in ("AGENT_SIGNAL_URL", "AGENT_SIGNAL_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(Path(__file__).anchor)  # no stack file of this checkout
    monkeypatch.setattr(dead_letters, "DEAD_PAGE_MAX", 2)
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=DISABLED, app=producer.app)
    dead = dead_by_drain(producer, pipeline, "stops", 5)
    yield producer, dead
    producer.close()
    pipeline.store.client.close()


def _statuses(producer: Producer, ids: list[str]) -> list[str]:
    return [str((producer.status(event_id) or {}).get("status")) for event_id in ids]


class TestRedriveAllDirect:
    def test_pages_and_their_count_as_over_http(
        self, five_dead: tuple[Producer, list[str]], capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Straight to Redis, ``dlq redrive --all`` goes a page at a time with the count on stderr after each."""
        producer, dead = five_dead
        assert main(["dlq", "redrive", "--all", "--json"]) == 0
        out, err = capsys.readouterr()
        assert sorted(json.loads(out)["redriven"]) == sorted(dead)
        assert err.splitlines() == ["redriven 2 of 5", "redriven 4 of 5", "redriven 5 of 5"]
        assert _statuses(producer, dead) == ["queued"] * 5

    def test_ctrl_c_says_the_count_so_far(
        self,
        five_dead: tuple[Producer, list[str]],
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """Ctrl-C during the second page: exit 130, the count of the first page on stderr and how to go on; the
        events of the pages not reached stay dead."""
        producer, dead = five_dead
        redrive = sdk_dead_letters.redrive_events
        calls: list[list[str] | None] = []

        def interrupted_on_the_second(producer: Any, ids: list[str] | None, **kwargs: Any) -> Any:
            calls.append(ids)
            if len(calls) == 2:
                raise KeyboardInterrupt
            return redrive(producer, ids, **kwargs)

        monkeypatch.setattr(sdk_dead_letters, "redrive_events", interrupted_on_the_second)
        assert main(["dlq", "redrive", "--all"]) == 130
        out, err = capsys.readouterr()
        assert out == ""
        assert err.splitlines() == [
            "redriven 2 of 5",
            "redriven 2 of 5, then interrupted (Ctrl-C); run it again for the rest",
        ]
        assert sorted(_statuses(producer, dead)) == ["dead"] * 3 + ["queued"] * 2


class _Pages:
    """``GET /v1/dlq`` answering ``pages`` in turn (an exception in their place is raised), and the redrive's
    answer: every id done."""

    def __init__(self, *pages: dict[str, Any] | BaseException) -> None:
        self.pages = list(pages)

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        if method == "POST":
            return {
                "redriven": kwargs["body"]["eventIds"],
                "discarded": kwargs["body"]["eventIds"],
                "notDead": [],
            }
        page = self.pages.pop(0)
        if isinstance(page, BaseException):
            raise page
        return page


FIRST = {"events": [{"eventId": "e1"}, {"eventId": "e2"}], "total": 4, "cursor": "c1"}


def test_the_count_is_out_of_the_list_as_it_stood_at_first(capsys: pytest.CaptureFixture[str]) -> None:
    """The total of a later page counts events that died again meanwhile (or are new): the count says "of 4", the
    size of the list when it started, never "of 6"."""
    api: Any = _Pages(FIRST, {"events": [{"eventId": "e3"}, {"eventId": "e4"}], "total": 4})
    result = dead_letters.act_on_every_dead(api, "/v1/dlq/redrive", "redriven")
    assert result == {"redriven": ["e1", "e2", "e3", "e4"], "notDead": []}
    assert capsys.readouterr().err.splitlines() == ["redriven 2 of 4", "redriven 4 of 4"]


def test_an_interrupted_http_loop_says_its_count(capsys: pytest.CaptureFixture[str]) -> None:
    """Over HTTP too, Ctrl-C between pages leaves the count so far on stderr; the stop goes on to main.py."""
    api: Any = _Pages(FIRST, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        dead_letters.act_on_every_dead(api, "/v1/dlq/discard", "discarded")
    assert capsys.readouterr().err.splitlines() == [
        "discarded 2 of 4",
        "discarded 2 of 4, then interrupted (Ctrl-C); run it again for the rest",
    ]
