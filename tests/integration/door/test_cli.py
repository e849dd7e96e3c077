"""`agent-signal enqueue / inspect / dlq / status / keys` as a user runs them (real processes, real Redis).

Straight to Redis (``REDIS_URL``, ``--tenant``), and from a second terminal over HTTP: against a stack that
``agent-signal run`` started in the same checkout (found through its stack file, no flags), or ``--url``/``--token``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from producers import Producer
from tests.conftest import ROOT, free_port, settings_env, wait_for

pytestmark = pytest.mark.integration


def _cli(
    settings: Any, *args: str, stdin: str | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """The CLI straight to the test's Redis (``REDIS_URL``); run outside any checkout, so that a ``make run``
    stack of this checkout (its stack file) is not picked up instead."""
    return subprocess.run(
        [sys.executable, "-m", "producers.cli", *args],
        cwd=cwd or "/",
        env=settings_env(settings),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def _settle(producer: Producer, wanted: dict[str, str]) -> None:
    """Wait until each event id has its status (``done``, ``dead``), read from the store."""

    def statuses() -> dict[str, str]:
        return {e: str((producer.status(e) or {}).get("status")) for e in wanted}

    wait_for(
        lambda: statuses() == wanted, timeout_s=60, what=f"statuses {wanted}", explain=lambda: str(statuses())
    )


GOOD = '{"sourceType":"bot.message.merged","sourceId":"%s","payload":{"topicId":"t1","message":"hi"}}'
# An event the door admits and its handler always refuses (the test plugin's, until test:fixed is set).
BAD = (
    '{"sourceType":"test.flaky","sourceId":"to-9","scopeKey":"topic:t1","payload":{"errorText":"bad input"}}'
)


class TestEnqueue:
    def test_summary_and_rejections_name_line_and_field(self, make_settings: Any, tmp_path: Path) -> None:
        """Valid lines are enqueued; each bad line is reported with its number and field; exit 1; summary last."""
        settings = make_settings()
        path = _write(
            tmp_path / "events.jsonl",
            [
                GOOD % "m1",
                GOOD % "m2",
                GOOD % "m1",
                '{"sourceType":"bot.message.merged","payload":{}}',
                "{not json",
                "",
                '{"sourceType":"nope.nope","sourceId":"x","payload":{}}',
            ],
        )
        result = _cli(settings, "enqueue", str(path))
        assert result.returncode == 1
        assert json.loads(result.stdout.strip().splitlines()[-1]) == {
            "accepted": 2,
            "duplicate": 1,
            "rejected": 3,
        }
        assert "line 4: sourceId is required (field: sourceId)" in result.stderr
        assert "line 5: not valid JSON" in result.stderr
        assert "line 7: sourceType: unknown source type 'nope.nope'" in result.stderr
        assert "Traceback" not in result.stderr

    def test_clean_file_exits_zero(self, make_settings: Any, tmp_path: Path) -> None:
        """All lines valid: exit 0 and no progress bar when stderr is not a terminal."""
        settings = make_settings()
        result = _cli(settings, "enqueue", str(_write(tmp_path / "e.jsonl", [GOOD % "a", GOOD % "b"])))
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == {"accepted": 2, "duplicate": 0, "rejected": 0}
        assert "[" not in result.stderr

    def test_ids_print_one_line_per_event_before_the_summary(
        self, make_settings: Any, tmp_path: Path
    ) -> None:
        """--ids prints {"line","eventId","sourceId","status"} per enqueued line, in line order, then the summary;
        each compact, as the summary is (docs/cli.md: they printed with spaces after ``:`` and ``,``)."""
        settings = make_settings()
        path = _write(tmp_path / "e.jsonl", [GOOD % "i1", "{bad", GOOD % "i2", GOOD % "i1"])
        lines = _cli(settings, "enqueue", str(path), "--ids").stdout.strip().splitlines()
        rows = [json.loads(line) for line in lines]
        assert [(r["line"], r["sourceId"], r["status"]) for r in rows[:-1]] == [
            (1, "i1", "accepted"),
            (3, "i2", "accepted"),
            (4, "i1", "duplicate"),
        ]
        assert rows[0]["eventId"].startswith("evt_") and rows[2]["eventId"] == rows[0]["eventId"]
        assert rows[-1] == {"accepted": 2, "duplicate": 1, "rejected": 1}
        assert lines == [json.dumps(row, separators=(",", ":")) for row in rows]

    def test_over_http(self, make_settings: Any, serve_web: Any, tmp_path: Path) -> None:
        """--url sends through POST /v1/events; a bad line is rejected alone, with its line and field."""
        settings = make_settings(api_token="tok")
        _, url = serve_web(settings)
        path = _write(
            tmp_path / "e.jsonl",
            [GOOD % "h1", '{"sourceType":"bot.message.merged","sourceId":"h2"}', GOOD % "h3", GOOD % "h1"],
        )
        result = _cli(settings, "enqueue", str(path), "--url", url)
        assert result.returncode == 1
        assert json.loads(result.stdout.strip().splitlines()[-1]) == {
            "accepted": 2,
            "duplicate": 1,
            "rejected": 1,
        }
        assert "line 2: payload is required (field: payload)" in result.stderr

    @pytest.mark.parametrize("over_http", [False, True])
    def test_another_users_dedupe_key_is_its_lines_rejection(
        self, make_settings: Any, serve_web: Any, tmp_path: Path, over_http: bool
    ) -> None:
        """A review: a line naming a second user with the first one's scope, type and sourceId (refused 422
        user_mismatch) stopped the run with no summary (straight to Redis) or left the lines after it unsent
        (over HTTP, a batch of one). It is that line's rejection; the others are sent."""
        settings = make_settings(api_token="tok")
        shared = '{"sourceType":"bot.message.merged","sourceId":"same-%s","userId":"%s","payload":{"topicId":"t1"}}'
        path = _write(
            tmp_path / "u.jsonl", [shared % ("a", "u1"), shared % ("a", "u2"), shared % ("b", "u2")]
        )
        extra = ["--url", serve_web(settings)[1], "--batch", "1"] if over_http else []
        result = _cli(settings, "enqueue", str(path), *extra)
        assert result.returncode == 1, result.stderr
        assert json.loads(result.stdout.strip().splitlines()[-1]) == {
            "accepted": 2,
            "duplicate": 0,
            "rejected": 1,
        }
        assert "line 2: " in result.stderr and "another user's event" in result.stderr, result.stderr

    def test_missing_file(self, make_settings: Any) -> None:
        """A missing file is a one-line error, exit 2."""
        result = _cli(make_settings(), "enqueue", "/nonexistent.jsonl")
        assert result.returncode == 2
        assert (
            result.stderr.strip()
            == "agent-signal enqueue: cannot read /nonexistent.jsonl: No such file or directory"
        )


class TestOperate:
    def test_inspect_status_and_dlq(self, make_settings: Any, start_worker: Any, tmp_path: Path) -> None:
        """A processed chain prints in five steps; a dead event is listed and can be redriven."""
        settings = make_settings(max_attempts=1)
        start_worker(settings)
        result = _cli(settings, "enqueue", "--ids", str(_write(tmp_path / "e.jsonl", [GOOD % "m1", BAD])))
        assert result.returncode == 0, result.stderr
        # the worker's progress is read from the store in this process: a CLI run per poll cost most of this
        # test's CPU (a process start each), and each command below is then run once, on a settled store
        good_id, bad_id = (json.loads(line)["eventId"] for line in result.stdout.splitlines()[:2])
        producer = Producer(settings)
        try:
            _settle(producer, {good_id: "done", bad_id: "dead"})
            events = json.loads(_cli(settings, "dlq", "list", "--json").stdout)["events"]
            assert events[0]["eventId"] == bad_id and events[0]["event"]["sourceId"] == "to-9"
            assert "flaky handler is broken: bad input" in events[0]["error"]
            text = _cli(settings, "inspect", "chain:m1").stdout
            for heading in (
                "1. source",
                "2. signals",
                "3. actions",
                "4. results",
                "5. edges",
                "dominant path:",
            ):
                assert heading in text
            assert (
                "bot.message.merged -> signal.message.received -> signal.action.applied -> action.activity.record"
                in text
            )
            assert (
                json.loads(_cli(settings, "inspect", "m1", "--json").stdout)["record"]["chainId"]
                == "chain:m1"
            )
            assert _cli(settings, "inspect", "chain:none").returncode == 1
            # one source id of two users' events: --user picks a user's run (a contract audit: the 409 told the
            # caller to ask by userId, which inspect had no way to)
            shared = '{"sourceType":"bot.message.merged","sourceId":"dup1","userId":"%s","payload":{"topicId":"%s","message":"from-%s"}}'
            lines = [shared % (u, f"t-{u}", u) for u in ("ua", "ub")]
            sent = _cli(settings, "enqueue", "--ids", str(_write(tmp_path / "d.jsonl", lines)))
            assert sent.returncode == 0, sent.stderr
            _settle(producer, {json.loads(line)["eventId"]: "done" for line in sent.stdout.splitlines()[:2]})
        finally:
            producer.close()
        for user, other in (("ua", "ub"), ("ub", "ua")):
            found = _cli(settings, "inspect", "dup1", "--json", "--user", user)
            assert f"from-{user}" in found.stdout and f"from-{other}" not in found.stdout, found.stderr

        header, row = (line.split("\t") for line in _cli(settings, "dlq", "list").stdout.splitlines())
        assert header[:6] == ["EVENT ID", "DIED (UTC)", "SOURCE TYPE", "SOURCE ID", "SCOPE", "TRIES"]
        assert (row[0], row[3], row[5]) == (events[0]["eventId"], "to-9", "1")
        redrive = _cli(settings, "dlq", "redrive", "--all", "--json")
        assert json.loads(redrive.stdout)["redriven"] == [events[0]["eventId"]]
        status = json.loads(_cli(settings, "status", events[0]["eventId"]).stdout)
        assert status["eventId"] == events[0]["eventId"]
        assert _cli(settings, "dlq", "redrive").returncode == 2


# ---- from a second terminal: the CLI over HTTP ----------------------------------------------------------


def _second_terminal(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The CLI as typed in another terminal: no REDIS_URL, no AGENT_SIGNAL_* (except ``env``), cwd ``cwd``."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("AGENT_SIGNAL_") and k not in ("REDIS_URL", "BROKER_URL")
    }
    clean.update({"PYTHONPATH": str(ROOT), **(env or {})})
    return subprocess.run(
        [sys.executable, "-m", "producers.cli", *args],
        cwd=cwd,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    """The whole stderr, asserted to be one line and no traceback."""
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text(errors="replace").rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A checkout of its own (a ``pyproject.toml`` marks its root), so its stack file is this test's alone."""
    root = tmp_path / "checkout"
    (root / "sub").mkdir(parents=True)
    (root / "pyproject.toml").write_text("")
    return root


@pytest.fixture
def run_stack(checkout: Path, tmp_path: Path) -> Iterator[Callable[[Any], str]]:
    """Factory: ``agent-signal run --no-replay`` in ``checkout`` on the test's Redis; returns the web URL once
    the stack file is written. The whole process group is stopped afterwards, killed if it lingers."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(settings: Any) -> str:
        env = settings_env(settings)
        env["PORT"] = str(free_port())
        log = tmp_path / "run.log"
        proc = subprocess.Popen(
            [sys.executable, "-m", "producers.cli", "run", "--no-replay"],
            cwd=checkout,
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        procs.append(proc)

        def ready() -> bool:
            assert proc.poll() is None, log.read_text(errors="replace")
            return "Ctrl-C stops everything." in log.read_text(errors="replace")

        wait_for(ready, timeout_s=60, interval_s=0.2, what="agent-signal run")
        return str(json.loads((checkout / ".agent-signal" / "stack.json").read_text())["url"])

    yield start
    for proc in procs:  # the whole group, whatever happened (a failed assertion, a timeout)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        if _group_members(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


class TestSecondTerminal:
    def test_verbs_find_the_run_stack_without_flags(
        self, make_settings: Any, run_stack: Any, checkout: Path, tmp_path: Path
    ) -> None:
        """With only `agent-signal run` in this checkout, enqueue --ids, status, inspect, dlq and keys work
        over its HTTP API from any directory of the checkout, with no REDIS_URL and no flags."""
        url = run_stack(make_settings(max_attempts=1))
        where = checkout / "sub"
        path = _write(tmp_path / "e.jsonl", [GOOD % "m1", BAD])
        sent = _second_terminal("enqueue", str(path), "--ids", cwd=where)
        assert sent.returncode == 0, sent.stderr
        rows = [json.loads(line) for line in sent.stdout.strip().splitlines()]
        assert [(r["line"], r["sourceId"], r["status"]) for r in rows[:2]] == [
            (1, "m1", "accepted"),
            (2, "to-9", "accepted"),
        ]
        assert rows[2] == {"accepted": 2, "duplicate": 0, "rejected": 0}
        good_id, bad_id = rows[0]["eventId"], rows[1]["eventId"]

        wait_for(
            lambda: httpx.get(f"{url}/v1/dlq").json()["total"] == 1, timeout_s=60, what="the dead letter"
        )
        wait_for(lambda: httpx.get(f"{url}/v1/events/{good_id}").json()["status"] == "done", what="m1 done")
        status = _second_terminal("status", good_id, cwd=where)
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["status"] == "done"
        text = _second_terminal("inspect", "m1", cwd=where).stdout
        assert "1. source" in text and "dominant path:" in text
        listed = _second_terminal("dlq", "list", cwd=where)
        assert listed.stdout.splitlines()[1].split("\t")[0] == bad_id, listed.stderr
        redrive = _second_terminal("dlq", "redrive", bad_id, cwd=where)
        assert redrive.stdout == f"EVENT ID\tRESULT\n{bad_id}\tredriven\n", redrive.stderr
        assert json.loads(_second_terminal("keys", "list", cwd=where).stdout) == []

    def test_status_by_source_id_is_an_answer_or_a_plain_no_event(
        self, make_settings: Any, run_stack: Any, checkout: Path, tmp_path: Path
    ) -> None:
        """`status SOURCE_ID` prints the event's record, or says "no event" in one line (exit 1), never an HTTP dump."""
        url = run_stack(make_settings())
        _second_terminal("enqueue", str(_write(tmp_path / "e.jsonl", [GOOD % "s1"])), cwd=checkout)
        result = _second_terminal("status", "s1", cwd=checkout)
        if result.returncode == 0:
            assert json.loads(result.stdout)["sourceId"] == "s1"
        else:
            assert result.returncode == 1
            assert _one_line(result) == "agent-signal status: no event 's1'"
        assert httpx.get(f"{url}/healthz").status_code == 200

    def test_unreachable_server_is_one_line_exit_2(self, checkout: Path, tmp_path: Path) -> None:
        """--url to a port nothing listens on: every verb says so in one stderr line, exit 2, no traceback."""
        # a port bound and never listened on refuses connections, and nobody else can listen there meanwhile
        with socket.socket() as held:
            held.bind(("127.0.0.1", 0))
            url = f"http://127.0.0.1:{held.getsockname()[1]}"
            path = _write(tmp_path / "e.jsonl", [GOOD % "u1"])
            for verb, name in (
                (["status", "evt_x"], "status"),
                (["inspect", "m1"], "inspect"),
                (["dlq", "list"], "dlq list"),
                (["dlq", "redrive", "--all"], "dlq redrive"),
                (["keys", "list"], "keys list"),
                (["enqueue", str(path)], "enqueue"),
            ):
                result = _second_terminal(*verb, "--url", url, cwd=checkout)
                assert result.returncode == 2, (verb, result.stderr)
                assert _one_line(result) == (
                    f"agent-signal {name}: cannot reach {url} (connection refused); is the stack running? (make run)"
                )

    def test_no_stack_and_no_redis_url_says_how_to_start_one(self, checkout: Path) -> None:
        """Without a stack, --url or REDIS_URL: one line naming make run, exit 2; a stale stack file is named."""
        result = _second_terminal("dlq", "list", cwd=checkout)
        assert (
            result.returncode == 2 and "no stack found" in _one_line(result) and "make run" in result.stderr
        )
        stale = {"version": 1, "pid": 2**22 + 1, "url": "http://127.0.0.1:9"}
        (checkout / ".agent-signal").mkdir()
        (checkout / ".agent-signal" / "stack.json").write_text(json.dumps(stale))
        result = _second_terminal("status", "evt_x", cwd=checkout)
        assert result.returncode == 2 and "is not running" in _one_line(result)


class TestAuthOverHttp:
    def test_url_and_token_with_a_bootstrap_key(
        self, make_settings: Any, serve_web: Any, checkout: Path, tmp_path: Path
    ) -> None:
        """With auth on, --url/--token (or AGENT_SIGNAL_URL/AGENT_SIGNAL_TOKEN) work; no token or a wrong one is
        one line with 401; the token is never printed."""
        key = "as_bootstrap_" + "k" * 24
        _, url = serve_web(make_settings(bootstrap_key=key))
        path = _write(tmp_path / "e.jsonl", [GOOD % "a1"])
        sent = _second_terminal("enqueue", str(path), "--ids", "--url", url, "--token", key, cwd=checkout)
        assert sent.returncode == 0, sent.stderr
        event_id = json.loads(sent.stdout.splitlines()[0])["eventId"]
        env = {"AGENT_SIGNAL_URL": url, "AGENT_SIGNAL_TOKEN": key}
        status = _second_terminal("status", event_id, cwd=checkout, env=env)
        assert status.returncode == 0 and json.loads(status.stdout)["eventId"] == event_id, status.stderr
        created = _second_terminal(
            "keys",
            "create",
            "--tenant",
            "default",
            "--role",
            "read",
            "--url",
            url,
            "--token",
            key,
            cwd=checkout,
        )
        reader = json.loads(created.stdout)
        assert reader["role"] == "read" and reader["key"].startswith("as_"), created.stderr
        listed = _second_terminal(
            "dlq", "list", "--json", "--url", url, "--token", reader["key"], cwd=checkout
        )
        assert json.loads(listed.stdout)["total"] == 0, listed.stderr

        for token in ("as_wrong", None):
            flags = ["--url", url] + (["--token", token] if token else [])
            for verb in (["status", event_id], ["dlq", "list"], ["enqueue", str(path)]):
                result = _second_terminal(*verb, *flags, cwd=checkout)
                assert result.returncode == 1, (verb, result.stderr)
                assert "HTTP 401" in _one_line(result)
                assert key not in result.stdout + result.stderr
        assert key not in sent.stderr + status.stdout + status.stderr + listed.stdout
