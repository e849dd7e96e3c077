"""The console's verbs from the command line (`runs`, `dlq discard`, `scopes`, `events cancel`, `receipts list`)
against real web and worker processes on the test's key prefix, as typed in a second terminal: `--url`, no
REDIS_URL. Each verb once with `--json` and once as a table (tab-separated lines when stdout is not a terminal,
fixed columns under a pseudo-terminal), and an API error as one line naming its field, exit 1.
"""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis import Redis

from tests.conftest import ROOT, free_port, settings_env, wait_for
from worker.keys.layout import BucketKeys
from worker.store.receipts import ReceiptStore

pytestmark = pytest.mark.integration

TERMINAL_COLUMNS = 100


def _event(source_id: str, scope: str = "topic:t1", **payload: Any) -> dict[str, Any]:
    body = {"topicId": scope.removeprefix("topic:"), "message": "hi", **payload}
    return {"sourceType": "bot.message.merged", "sourceId": source_id, "scopeKey": scope, "payload": body}


def _flaky(source_id: str) -> dict[str, Any]:
    """An event the door admits and the test plugin's handler always refuses (dead after one attempt)."""
    payload = {"errorText": "bad input"}
    return {"sourceType": "test.flaky", "sourceId": source_id, "scopeKey": "topic:t1", "payload": payload}


def _env(**extra: str) -> dict[str, str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("AGENT_SIGNAL_") and k not in ("REDIS_URL", "BROKER_URL")
    }
    return {**clean, "PYTHONPATH": str(ROOT), **extra}


def cli(url: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``agent-signal ARGS --url URL`` in a second terminal (no REDIS_URL), stdout a pipe."""
    return subprocess.run(
        [sys.executable, "-m", "producers.cli", *args, "--url", url],
        cwd="/",
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=60,
    )


def on_terminal(url: str, *args: str) -> tuple[int, list[str]]:
    """The same with stdout a pseudo-terminal ``TERMINAL_COLUMNS`` wide: (exit code, the lines it printed)."""
    master, replica = pty.openpty()
    env = _env(COLUMNS=str(TERMINAL_COLUMNS))
    argv = [sys.executable, "-m", "producers.cli", *args, "--url", url]
    proc = subprocess.Popen(argv, cwd="/", env=env, stdout=replica, stderr=subprocess.DEVNULL)
    os.close(replica)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    code = proc.wait(timeout=60)
    return code, out.decode().replace("\r\n", "\n").splitlines()


def _rows(result: subprocess.CompletedProcess[str]) -> list[list[str]]:
    """Tab-separated output as rows (the header first)."""
    assert result.returncode == 0, result.stderr
    return [line.split("\t") for line in result.stdout.splitlines()]


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def _send(url: str, *events: dict[str, Any]) -> list[str]:
    answer = httpx.post(f"{url}/v1/events", json={"events": list(events)}, timeout=30)
    assert answer.status_code == 202, answer.text
    return [r["eventId"] for r in answer.json()["results"]]


def _status(url: str, event_id: str) -> str:
    return str(httpx.get(f"{url}/v1/events/{event_id}", timeout=10).json()["status"])


@pytest.fixture
def stack(make_settings: Any, serve_web: Any, start_worker: Any) -> str:
    """A worker and the web app on the test's prefix (one attempt per event); the web URL."""
    settings = make_settings(max_attempts=1)
    start_worker(settings)
    return str(serve_web(settings)[1])


@pytest.fixture
def web(make_settings: Any, serve_web: Any) -> str:
    """The web app alone: what is sent stays queued."""
    return str(serve_web(make_settings())[1])


class TestRuns:
    def test_list_and_show(self, stack: str) -> None:
        """runs list filters and prints JSON or rows; runs show gives the attempts with their errors."""
        good, bad = _send(stack, _event("m1"), _flaky("to-9"))
        wait_for(lambda: _status(stack, good) == "done" and _status(stack, bad) == "dead", timeout_s=60)

        listed = json.loads(cli(stack, "runs", "list", "--json").stdout)
        assert {e["eventId"] for e in listed["events"]} == {good, bad}
        header, *rows = _rows(cli(stack, "runs", "list", "--status", "dead"))
        assert header[:4] == ["EVENT ID", "STATUS", "SOURCE TYPE", "SOURCE ID"] and header[-1] == "ERROR"
        assert [(r[0], r[1], r[3]) for r in rows] == [(bad, "dead", "to-9")]
        assert "flaky handler is broken: bad input" in rows[0][-1]
        only = json.loads(cli(stack, "runs", "list", "--source-type", "test.flaky", "--json").stdout)
        assert [e["eventId"] for e in only["events"]] == [bad]

        shown = json.loads(cli(stack, "runs", "show", bad, "--json").stdout)
        assert [(a["attempt"], a["status"]) for a in shown["attemptsHistory"]] == [(1, "failed")]
        text = cli(stack, "runs", "show", "to-9")
        assert text.returncode == 0, text.stderr
        record, attempts = text.stdout.split("\n\n")
        assert "status\tdead" in record.splitlines() and f"eventId\t{bad}" in record.splitlines()
        attempt_rows = [line.split("\t") for line in attempts.splitlines()]
        assert attempt_rows[0][:3] == ["RUN", "ATTEMPT", "STATUS"]
        assert attempt_rows[1][:3] == ["0", "1", "failed"] and "bad input" in attempt_rows[1][-1]

    def test_table_on_a_terminal_has_fixed_columns(self, web: str) -> None:
        """On a terminal the columns line up and a long cell is cut, ending in an ellipsis."""
        long_id = "a-source-id-far-longer-than-its-column-" + "x" * 40
        (event_id,) = _send(web, _event(long_id))
        code, lines = on_terminal(web, "runs", "list")
        assert code == 0, lines
        header, row = lines
        assert header.startswith("EVENT ID") and row.startswith(event_id)
        column = header.index("SOURCE ID")
        assert row[column:].startswith("a-source-id-far-lon…  ") and long_id not in row
        assert header.index("SCOPE") == row.index("topic:t1")

        code, lines = on_terminal(web, "runs", "show", event_id)
        assert code == 0 and f"eventId:    {event_id}" in lines and "(no attempts yet)" in lines

    def test_list_follows_the_cursor_up_to_limit(self, web: str) -> None:
        """--limit N is the total: pages of at most 200 are followed by their cursor (210 queued events)."""
        sent = _send(web, *(_event(f"p{i}") for i in range(210)))
        first = json.loads(cli(web, "runs", "list", "--limit", "205", "--json").stdout)
        assert len(first["events"]) == 205 and len({e["eventId"] for e in first["events"]}) == 205
        assert first["cursor"]
        every = _rows(cli(web, "runs", "list", "--limit", "500"))
        assert sorted(r[0] for r in every[1:]) == sorted(sent)
        assert len(_rows(cli(web, "runs", "list"))) == 1 + 50  # the default limit

    def test_api_errors_are_one_line_naming_the_field(self, web: str) -> None:
        """An unknown id or a bad filter: the API's status, code and field in one line, exit 1; usage, exit 2."""
        unknown = cli(web, "runs", "show", "evt_nope")
        assert unknown.returncode == 1
        line = _one_line(unknown)
        assert line.startswith("agent-signal runs show: HTTP 404 not_found: no event 'evt_nope'")
        assert line.endswith("(field: eventId)")
        bad = cli(web, "runs", "list", "--status", "bogus")
        assert bad.returncode == 1 and _one_line(bad).endswith("(field: status)")
        assert cli(web, "runs", "list", "--limit", "0").returncode == 2


class TestDeadLetters:
    def test_discard(self, stack: str) -> None:
        """dlq discard IDs --reason keeps an audit record; --all takes the rest; a live event is "not dead"."""
        first, second, third = _send(stack, _flaky("d1"), _flaky("d2"), _flaky("d3"))
        wait_for(lambda: all(_status(stack, e) == "dead" for e in (first, second, third)), timeout_s=60)

        answer = json.loads(cli(stack, "dlq", "discard", first, "--reason", "known bad", "--json").stdout)
        assert answer == {"discarded": [first], "notDead": []}
        audit = httpx.get(f"{stack}/v1/dlq", params={"state": "discarded"}).json()["events"]
        assert [(e["eventId"], e["reason"]) for e in audit] == [(first, "known bad")]
        header, *rows = _rows(cli(stack, "dlq", "discard", "--all"))
        assert header == ["EVENT ID", "RESULT"]
        assert sorted(rows) == sorted([[second, "discarded"], [third, "discarded"]])

        again = cli(stack, "dlq", "discard", first)
        assert again.returncode == 1 and again.stdout.splitlines()[1].split("\t") == [
            first,
            "not dead: left as it is",
        ]
        assert cli(stack, "dlq", "discard").returncode == 2
        assert cli(stack, "dlq", "discard", first, "--all").returncode == 2


class TestScopes:
    def test_list_pause_resume(self, web: str) -> None:
        """scopes list shows a waiting scope; pause and resume flip it; --state filters; a bad state names it."""
        _send(web, _event("s1", scope="topic:a/b"))
        scopes = json.loads(cli(web, "scopes", "list", "--json").stdout)["scopes"]
        assert [(s["scopeKey"], s["inboxDepth"], s["paused"]) for s in scopes] == [("topic:a/b", 1, False)]

        paused = json.loads(cli(web, "scopes", "pause", "topic:a/b", "--json").stdout)
        assert paused == {"scopeKey": "topic:a/b", "paused": True, "changed": True}
        assert _rows(cli(web, "scopes", "pause", "topic:a/b")) == [
            ["SCOPE", "PAUSED", "CHANGED"],
            ["topic:a/b", "yes", "no"],
        ]
        header, *rows = _rows(cli(web, "scopes", "list", "--state", "paused"))
        assert header[:4] == ["SCOPE", "STATE", "INBOX", "PAUSED"]
        assert [r[:4] for r in rows] == [["topic:a/b", "paused", "1", "yes"]]
        resumed = json.loads(cli(web, "scopes", "resume", "topic:a/b", "--json").stdout)
        assert resumed == {"scopeKey": "topic:a/b", "paused": False, "changed": True}
        assert _rows(cli(web, "scopes", "list", "--state", "paused")) == [header]

        code, lines = on_terminal(web, "scopes", "list")
        assert code == 0 and lines[0].startswith("SCOPE") and lines[1].startswith("topic:a/b ")
        bad = cli(web, "scopes", "list", "--state", "gone")
        assert bad.returncode == 1 and _one_line(bad).endswith("(field: state)")

    def test_list_follows_the_cursor_up_to_limit(self, web: str) -> None:
        """258 scopes: the default 200 by scope key, and stderr says more follow (JSON: the cursor); --limit 300
        follows the cursor to every one of them, the last scope of the alphabet included."""
        scopes = [f"topic:many-{n:03d}" for n in range(258)]
        _send(web, *(_event(f"many-{n}", scope=scope) for n, scope in enumerate(scopes)))

        first = cli(web, "scopes", "list", "--json")
        assert first.returncode == 0, first.stderr
        page = json.loads(first.stdout)
        assert [s["scopeKey"] for s in page["scopes"]] == scopes[:200] and page["cursor"] == scopes[199]
        table = cli(web, "scopes", "list")
        assert [r[0] for r in _rows(table)[1:]] == scopes[:200]
        assert "200 scopes shown" in table.stderr and "--limit" in table.stderr

        every = json.loads(cli(web, "scopes", "list", "--limit", "300", "--json").stdout)
        assert [s["scopeKey"] for s in every["scopes"]] == scopes and "cursor" not in every
        complete = cli(web, "scopes", "list", "--limit", "300")
        assert [line.split("\t")[0] for line in complete.stdout.splitlines()[1:]] == scopes
        assert complete.stderr == ""


class TestEvents:
    def test_cancel(self, web: str) -> None:
        """A queued event is cancelled (JSON, then a table; again is no error); an unknown id is one line, exit 1."""
        first, second = _send(web, _event("c1"), _event("c2"))
        answer = json.loads(cli(web, "events", "cancel", first, "--json").stdout)
        assert answer == {"eventId": first, "status": "cancelled", "cancelRequested": False}
        assert _rows(cli(web, "events", "cancel", "c2")) == [
            ["EVENT ID", "STATUS", "STOPS BEFORE NEXT ACTION"],
            [second, "cancelled", "no"],
        ]
        assert _status(web, second) == "cancelled"
        again = json.loads(cli(web, "events", "cancel", first, "--json").stdout)
        assert again["status"] == "cancelled"
        unknown = cli(web, "events", "cancel", "evt_nope")
        assert unknown.returncode == 1 and _one_line(unknown).endswith("(field: eventId)")


class TestReceipts:
    def test_list_by_user(self, web: str, redis_client: Redis, keys: BucketKeys) -> None:
        """receipts list --user lists that user's receipts newest first, all pages up to --limit; --agent and
        --topic narrow them; a user without any is an empty list."""
        store = ReceiptStore(redis_client, keys, ttl_s=600)
        for n in range(60):  # more than one page (50)
            agent, topic = ("a1", "t1") if n % 2 else ("a2", "t2")
            store.append(
                {"id": f"rcpt_{n}", "userId": "u1", "agentId": agent, "topicId": topic, "createdAt": 1000 + n}
                | {"kind": "memory", "status": "applied", "title": f"memory {n}", "metadata": {}}
            )
        every = json.loads(cli(web, "receipts", "list", "--user", "u1", "--limit", "100", "--json").stdout)
        assert [r["id"] for r in every["receipts"]] == [f"rcpt_{n}" for n in range(59, -1, -1)]
        narrowed = _rows(cli(web, "receipts", "list", "--user", "u1", "--agent", "a1", "--topic", "t1"))
        assert narrowed[0][:3] == ["CREATED (UTC)", "KIND", "STATUS"] and len(narrowed) == 1 + 20
        assert {r[-1] for r in narrowed[1:]} <= {f"memory {n}" for n in range(1, 60, 2)}
        assert json.loads(cli(web, "receipts", "list", "--user", "u2", "--json").stdout) == {"receipts": []}
        code, lines = on_terminal(web, "receipts", "list", "--user", "u1", "--limit", "1")
        assert code == 0 and lines[0].startswith("CREATED (UTC)") and "memory 59" in lines[1]
        assert cli(web, "receipts", "list").returncode == 2  # --user is required


class TestAuth:
    def test_token_and_its_absence(self, make_settings: Any, serve_web: Any) -> None:
        """With auth on, --token is sent (never printed); without it, one line with 401 and how to give one."""
        key = "as_bootstrap_" + "k" * 24
        _, url = serve_web(make_settings(bootstrap_key=key))
        denied = cli(url, "scopes", "list")
        assert denied.returncode == 1
        assert "HTTP 401" in _one_line(denied) and "--token" in denied.stderr
        allowed = cli(url, "scopes", "list", "--token", key)
        assert allowed.returncode == 0 and key not in allowed.stdout + allowed.stderr
        assert json.loads(cli(url, "runs", "list", "--json", AGENT_SIGNAL_TOKEN=key).stdout) == {"events": []}


class TestSecondWorker:
    def test_worker_joins_the_run_stack(self, make_settings: Any, tmp_path: Path) -> None:
        """`agent-signal run` on its embedded Redis (no REDIS_URL), then `agent-signal worker` in a second
        terminal of the checkout: it says which stack it joined and registers on that Redis, prefix and queue."""
        checkout = tmp_path / "checkout"
        checkout.mkdir()
        (checkout / "pyproject.toml").write_text("")
        settings = make_settings()
        env = {
            k: v
            for k, v in settings_env(settings).items()
            if k not in ("REDIS_URL", "AGENT_SIGNAL_REDIS_URL")
        }
        env["PORT"] = str(free_port())
        log = tmp_path / "run.log"
        run = _start([sys.executable, "-m", "producers.cli", "run", "--no-replay"], checkout, env, log)
        worker_log = tmp_path / "worker.log"
        worker = None
        try:
            wait_for(lambda: _alive(run, log) and "Ctrl-C stops everything." in log.read_text(), timeout_s=90)
            stack = json.loads((checkout / ".agent-signal" / "stack.json").read_text())
            assert stack["redisUrl"].startswith("unix://") and stack["keyPrefix"] == settings.key_prefix
            worker = _start([sys.executable, "-m", "producers.cli", "worker"], checkout, _env(), worker_log)
            client = Redis.from_url(stack["redisUrl"], decode_responses=True)
            workers = BucketKeys(settings.key_prefix).workers
            wait_for(lambda: _alive(worker, worker_log) and client.hlen(workers) == 2, timeout_s=90)
            client.close()
            prefix = "agent-signal worker: joining the stack of this checkout ("
            (joined,) = [line for line in worker_log.read_text().splitlines() if line.startswith(prefix)]
            assert f"Redis {stack['redisUrl']}, broker the same Redis" in joined
            assert f"queue {settings.queue_name!r}" in joined
        finally:
            for proc in (worker, run):
                if proc is not None and proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(timeout=60)


def _start(argv: list[str], cwd: Path, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, cwd=cwd, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)


def _alive(proc: subprocess.Popen[bytes], log: Path) -> bool:
    assert proc.poll() is None, log.read_text(errors="replace")
    return True
