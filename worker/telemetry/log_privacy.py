"""What keeps user content out of log lines (issue 26, finding 9): one structlog processor that every line
passes last, ours and Celery's and kombu's alike (worker/telemetry/logs.py installs it), and the rules our own log calls
follow.

* Ids a user or a producer chose (``userId``, ``scopeKey``, ``scopeRef``, ``sourceId``, ``chainId``,
  ``outboxRecord``) are logged as fields, never inside the message text, and this processor turns each into
  its pseudonym (worker/telemetry/pseudonyms.py); before the process knows its key, into ``(hidden)``. ``eventId`` (a
  hash) stays as it is: it is the handle to look an event up by (``GET /v1/events/{eventId}``).
* Celery's task lines carry the task's arguments in their ``data`` field (``Task … received``, ``… raised``):
  they are dropped. Tasks are also published with :data:`HIDDEN_TASK_ARGS`, which is what task events, Flower
  and Celery's own lines show instead of the arguments.
* Lines of Celery and kombu that print a whole task message (``TaskPool: Apply`` at DEBUG; an unregistered,
  invalid or undecodable message) keep their text with every value hidden.
* A traceback keeps its frames and exception types; the exception's message is kept only for the kinds
  whose messages describe the infrastructure (:data:`DESCRIBED_ERRORS`: sockets, Redis connections), because
  others quote their input: a parser's error quotes the text it could not parse. :func:`describe_error` is
  the same rule for a message that names an error.
"""

from __future__ import annotations

import logging
import re
import sys
import traceback
from collections.abc import MutableMapping
from typing import Any

from redis import exceptions as redis_errors

from worker.core.replication import NotReplicated
from worker.telemetry.pseudonyms import Pseudonyms

__all__ = [
    "DESCRIBED_ERRORS",
    "HIDDEN",
    "HIDDEN_TASK_ARGS",
    "PSEUDONYMIZED_FIELDS",
    "LogPrivacy",
    "describe_error",
    "refusal_kind",
    "traceback_without_messages",
    "without_url_secrets",
]

HIDDEN = "(hidden)"
# send_task options: what Celery's lines, task events and Flower show instead of a task's arguments.
HIDDEN_TASK_ARGS: dict[str, str] = {"argsrepr": HIDDEN, "kwargsrepr": HIDDEN}
PSEUDONYMIZED_FIELDS = ("userId", "scopeKey", "scopeRef", "sourceId", "chainId", "outboxRecord")
# Exceptions whose messages say what failed in the infrastructure, never what a user sent.
DESCRIBED_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    redis_errors.ConnectionError,
    redis_errors.TimeoutError,
    redis_errors.OutOfMemoryError,
    redis_errors.ReadOnlyError,
    redis_errors.NoPermissionError,  # names the command or says "keys"/"channels", never which
    NotReplicated,
)
# Celery/kombu templates that print a task message (body, arguments or headers); matched by their start.
_MESSAGE_DUMPS = (
    "TaskPool: Apply",
    "Received unregistered task",
    "Received invalid task message",
    "Received and deleted unknown message",
    "Can't decode message body",
)
_TASK_DATA_HIDDEN = ("args", "kwargs", "exc", "traceback")  # Celery's context: args, errors
_PLACEHOLDER = re.compile(r"%(?:\(\w+\))?[-#0 +]*\d*(?:\.\d+)?[sdrifxXeEgGc]")


def refusal_kind(reason: str) -> str:
    """What kind of refusal a commit's reason is (``WRONGTYPE``, ``command not allowed``…): the text before
    its first ``:``, which names no key (keys name users: ``memories:<userId>``)."""
    return reason.split(":", 1)[0].strip()[:80] or "refused"


def describe_error(exc: BaseException) -> str:
    """``Type: message`` for the infrastructure's errors, the type alone for any other."""
    name = type(exc).__name__
    return f"{name}: {exc}" if isinstance(exc, DESCRIBED_ERRORS) else name


# A URL's scheme, its user info (dropped), its host and path (kept), and its query or fragment (dropped).
# The user info runs to the last '@' before the host (a password may hold an '@' of its own).
_URL = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://)([^\s/?#'\"<>]*@)?([^\s?#'\"<>]*)([?#][^\s'\"<>]*)?")


def without_url_secrets(text: str) -> str:
    """``text`` with every URL's user info, query and fragment replaced by ``…``: an HTTP client's error
    quotes the URL it called, and a webhook URL may carry a key (``?api_key=``, ``user:password@``). What an
    operator needs (the host and the path) is kept."""

    def shown(match: re.Match[str]) -> str:
        scheme, userinfo, rest, query = match.groups()
        return f"{scheme}{'…@' if userinfo else ''}{rest}{'?…' if query else ''}"

    return _URL.sub(shown, text)


def traceback_without_messages(exc: BaseException) -> str:
    """The traceback of ``exc`` (and of its causes) with each message kept only when :func:`describe_error`
    would keep it."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not seen for seen in chain):
        chain.append(current)
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    parts = []
    for one in reversed(chain):
        frames = "".join(traceback.format_tb(one.__traceback__))
        head = "Traceback (most recent call last):\n" if frames else ""
        parts.append(f"{head}{frames}{describe_error(one)}\n")
    return "\nDuring the handling of the above, another exception occurred:\n\n".join(parts).rstrip("\n")


class LogPrivacy:
    """The processor; :meth:`use` gives it the process's pseudonyms once they are known."""

    def __init__(self) -> None:
        self.pseudonyms: Pseudonyms | None = None

    def use(self, pseudonyms: Pseudonyms | None) -> None:
        self.pseudonyms = pseudonyms

    def __call__(self, _: Any, __: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        for name in PSEUDONYMIZED_FIELDS:
            value = event_dict.get(name)
            if isinstance(value, str) and value:
                event_dict[name] = self.pseudonyms.of(value) if self.pseudonyms is not None else HIDDEN
        record = event_dict.get("_record")
        if isinstance(record, logging.LogRecord) and not event_dict.get("_from_structlog"):
            _foreign(record, event_dict)
        exc_info = event_dict.get("exc_info")
        if exc_info:
            exc = exc_info[1] if isinstance(exc_info, tuple) else exc_info
            if exc is True:  # structlog's exc_info=True: the exception being handled
                exc = sys.exc_info()[1]
            if isinstance(exc, BaseException):
                event_dict.pop("exc_info")
                event_dict["exception"] = traceback_without_messages(exc)
        return event_dict


def _foreign(record: logging.LogRecord, event_dict: MutableMapping[str, Any]) -> None:
    """A standard-library record (Celery's, kombu's): its task arguments, message dumps and error texts."""
    data = event_dict.get("data")
    if isinstance(data, dict):
        event_dict["data"] = {k: v for k, v in data.items() if k not in _TASK_DATA_HIDDEN}
    template = record.msg if isinstance(record.msg, str) else ""
    if template.startswith(_MESSAGE_DUMPS):
        event_dict["event"] = _PLACEHOLDER.sub(HIDDEN, template).strip()
    elif isinstance(data, dict) and "exc" in data:
        # Celery's "Task … raised …: %(exc)s" quotes the exception's message: say its kind instead.
        error = record.exc_info[1] if record.exc_info else None
        context = {**data, "exc": describe_error(error) if error is not None else HIDDEN}
        try:
            event_dict["event"] = template % context
        except (KeyError, TypeError, ValueError):
            event_dict["event"] = _PLACEHOLDER.sub(HIDDEN, template).strip()
