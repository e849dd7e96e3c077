"""worker/telemetry/log_privacy.py: the processor every log line passes, and the rules our own log calls follow.

Records are real ``logging.LogRecord`` objects rendered by the formatter ``configure_logging`` installs, so
these tests see exactly the JSON line a process would write (Celery's own templates included)."""

from __future__ import annotations

import ast
import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from celery.app.trace import LOG_FAILURE, LOG_RECEIVED
from celery.worker.consumer.consumer import INVALID_TASK_ERROR
from redis.exceptions import ConnectionError as RedisConnectionError

from worker.telemetry.log_privacy import (
    HIDDEN,
    describe_error,
    traceback_without_messages,
    without_url_secrets,
)
from worker.telemetry.logs import configure_logging, end_event, event_ids, start_event, use_pseudonyms
from worker.telemetry.pseudonyms import Pseudonyms

ROOT = Path(__file__).resolve().parents[4]
SECRET = "quartz-user-text"  # what must never reach a line
PSEUDONYMS = Pseudonyms(b"k" * 32)


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    """The root logger's lines (JSON) while the test runs; logging is restored afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    configure_logging(env="test", level="DEBUG", fmt="json")
    out = io.StringIO()
    root.handlers[0].setStream(out)  # type: ignore[attr-defined]
    use_pseudonyms(PSEUDONYMS)
    yield out
    use_pseudonyms(None)
    root.handlers[:] = handlers
    root.setLevel(level)


def _last(out: io.StringIO) -> dict[str, Any]:
    return dict(json.loads(out.getvalue().strip().splitlines()[-1]))


class TestFields:
    def test_ids_chosen_by_users_become_pseudonyms(self, lines: io.StringIO) -> None:
        """userId, scopeKey, scopeRef, sourceId, chainId and outboxRecord are written as the keyed pseudonym;
        eventId and tenant stay as they are."""
        ids = {"userId": "u1", "scopeKey": "user:u1", "scopeRef": "t/user:u1", "sourceId": "msg_1"}
        ids |= {"chainId": "chain:msg_1", "outboxRecord": "agent-run:op-1"}
        logging.getLogger("worker.x").warning("hello", extra={**ids, "eventId": "evt_1", "tenant": "t"})
        line = _last(lines)
        assert {name: line[name] for name in ids} == {name: PSEUDONYMS.of(v) for name, v in ids.items()}
        assert line["eventId"] == "evt_1" and line["tenant"] == "t"

    def test_a_running_events_ids_reach_every_line_until_it_ends(self, lines: io.StringIO) -> None:
        """The drain names its event once (start_event), adds its chain and source when it read them
        (event_ids): every line until end_event carries them, user-chosen ones as pseudonyms; none after."""
        start_event(eventId="evt_7", scopeKey="user:u7", attempt=2, sourceId=None)
        logging.getLogger("worker.x").info("started")
        first = _last(lines)
        event_ids(chainId="chain:msg_7", sourceId="msg_7")
        structlog.get_logger("worker.y").info("running")
        second = _last(lines)
        end_event()
        logging.getLogger("worker.x").info("after")
        after = _last(lines)
        assert (first["eventId"], first["attempt"], first["scopeKey"]) == (
            "evt_7",
            2,
            PSEUDONYMS.of("user:u7"),
        )
        assert "sourceId" not in first and "chainId" not in first
        assert second["chainId"] == PSEUDONYMS.of("chain:msg_7") and second["eventId"] == "evt_7"
        assert not {"eventId", "scopeKey", "attempt", "chainId", "sourceId"} & after.keys()
        assert "msg_7" not in lines.getvalue() and "user:u7" not in lines.getvalue()

    def test_before_the_key_is_known_ids_are_hidden(self, lines: io.StringIO) -> None:
        """A process that has not read its key yet writes ``(hidden)``, never the id."""
        use_pseudonyms(None)
        logging.getLogger("worker.x").info("early", extra={"userId": SECRET})
        assert _last(lines)["userId"] == HIDDEN and SECRET not in lines.getvalue()

    def test_the_pseudonym_is_keyed(self) -> None:
        """Two deployments (keys) name one id differently; one deployment always the same way."""
        other = Pseudonyms(b"o" * 32)
        assert PSEUDONYMS.of("u1") == PSEUDONYMS.of("u1") != other.of("u1")
        assert PSEUDONYMS.of("u1").startswith("pn_") and "kkkk" not in repr(PSEUDONYMS)


class TestCelery:
    def test_task_arguments_leave_the_received_line(self, lines: io.StringIO) -> None:
        """Celery's "Task … received" line passes the arguments in its ``data`` extra: they are dropped."""
        context = {"id": "t-1", "name": "agent_signal.agent_run", "args": f"[{SECRET!r}]", "kwargs": "{}"}
        logging.getLogger("celery.worker.strategy").info(LOG_RECEIVED, context, extra={"data": context})
        line = _last(lines)
        assert line["event"] == "Task agent_signal.agent_run[t-1] received"
        assert SECRET not in lines.getvalue() and "args" not in line["data"]

    def test_a_task_failure_names_the_error_kind_only(self, lines: io.StringIO) -> None:
        """``raised unexpected: %(exc)s`` and the traceback: the exception's type, never its message."""
        try:
            raise ValueError(f"cannot parse {SECRET}")
        except ValueError as exc:
            context = {"id": "t-2", "name": "x", "exc": repr(exc), "traceback": f"...{SECRET}", "args": "[]"}
            context |= {
                "description": "raised unexpected",
                "kwargs": "{}",
                "hostname": "h",
                "internal": False,
            }
            logging.getLogger("celery.app.trace").error(
                LOG_FAILURE, context, exc_info=True, extra={"data": context}
            )
        line = _last(lines)
        assert line["event"] == "Task x[t-2] raised unexpected: ValueError"
        assert "Traceback" in line["exception"] and line["exception"].endswith("ValueError")
        assert SECRET not in lines.getvalue()

    def test_message_dumps_keep_their_text_without_values(self, lines: io.StringIO) -> None:
        """``TaskPool: Apply`` (DEBUG) and an invalid message's report print the message: values hidden."""
        logging.getLogger("celery.pool").debug("TaskPool: Apply %s (args:%s kwargs:%s)", "f", (SECRET,), {})
        assert _last(lines)["event"] == f"TaskPool: Apply {HIDDEN} (args:{HIDDEN} kwargs:{HIDDEN})"
        logging.getLogger("celery.worker.consumer.consumer").error(INVALID_TASK_ERROR, "bad", SECRET)
        assert _last(lines)["event"].startswith(f"Received invalid task message: {HIDDEN}")
        assert SECRET not in lines.getvalue()


class TestErrors:
    def test_infrastructure_errors_keep_their_message(self) -> None:
        """A socket's or Redis connection's message says what failed; anything else only its type."""
        assert (
            describe_error(RedisConnectionError("Connection refused"))
            == "ConnectionError: Connection refused"
        )
        assert describe_error(KeyError(SECRET)) == "KeyError"

    def test_tracebacks_keep_frames_and_types_of_the_whole_chain(self) -> None:
        """Causes are shown too, each without its message unless it is an infrastructure error."""
        try:
            try:
                raise OSError("disk full")
            except OSError as inner:
                raise RuntimeError(SECRET) from inner
        except RuntimeError as exc:
            text = traceback_without_messages(exc)
        assert "OSError: disk full" in text and text.endswith("RuntimeError") and SECRET not in text
        assert "test_tracebacks_keep_frames" in text  # the frames are there

    def test_our_log_calls_do_not_format_an_exception_into_the_message(self) -> None:
        """No log call in the packages passes a caught exception as a %-argument (its message may quote
        input): they pass ``describe_error(exc)``, or the exception as ``exc_info``."""
        offenders = []
        for path in _sources():
            for function in ast.walk(ast.parse(path.read_text())):
                if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                caught = {h.name for h in ast.walk(function) if isinstance(h, ast.ExceptHandler) and h.name}
                for call in ast.walk(function):
                    if _is_log_call(call) and any(
                        isinstance(a, ast.Name) and a.id in caught for a in call.args[1:]
                    ):
                        offenders.append(f"{path.relative_to(ROOT)}:{call.lineno}")
        assert offenders == []


def _sources() -> list[Path]:
    return [p for pkg in ("worker", "policies", "sessions", "producers") for p in (ROOT / pkg).rglob("*.py")]


def _is_log_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("debug", "info", "warning", "error", "exception", "critical")
    )


def test_every_task_is_published_with_its_arguments_hidden() -> None:
    """Every ``send_task`` in the packages passes ``**HIDDEN_TASK_ARGS`` (argsrepr/kwargsrepr), which is what
    Celery's lines, task events and Flower show."""
    missing: list[str] = []
    sends = 0
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "send_task"
            ):
                sends += 1
                spread = [k.value for k in node.keywords if k.arg is None]
                if not any(isinstance(v, ast.Name) and v.id == "HIDDEN_TASK_ARGS" for v in spread):
                    missing.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert missing == [] and sends >= 3  # the drain and drain_next (fair share), and plugin tasks


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("failed: https://u:p@ss@hooks.example/x?k=1 (500)", "failed: https://…@hooks.example/x?… (500)"),
        ("redis://:pw@127.0.0.1:6379/0 refused", "redis://…@127.0.0.1:6379/0 refused"),
        ("https://host/a@b?token=1", "https://host/a@b?…"),
        ("see https://a.example/b", "see https://a.example/b"),
    ],
)
def test_a_url_keeps_its_host_and_path_and_loses_its_secrets(text: str, shown: str) -> None:
    """User info (up to the last '@' before the host: a password may hold one), query and fragment go."""
    assert without_url_secrets(text) == shown
