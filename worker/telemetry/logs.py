"""Structured logs (structlog) for every process: JSON lines in production, a console renderer in
development. Standard-library loggers (ours, Celery's, uvicorn's) go through the same processors, so every
line inside a chain carries ``trace_id``, ``span_id``, ``chainId``, ``scopeKey``, ``sourceId`` and
``eventId`` from the context variables bound by the pipeline, and ``task_id``/``task_name`` bound in Celery's
``task_prerun`` (cleared in ``task_postrun``: prefork children are reused). No line carries user content at any
level: the last processor (worker/telemetry/log_privacy.py) turns user, scope, source and chain ids into pseudonyms
(worker/telemetry/pseudonyms.py; :func:`use_pseudonyms` gives the key once a process has read it, ``(hidden)`` until
then), drops Celery's task arguments and message dumps, and keeps tracebacks' frames without their messages.
``httpx`` and ``httpcore`` log at WARNING whatever the level: at INFO httpx logs every request's full URL, and
outbound URLs may carry secrets in their query (webhook and judge endpoints).
"""

from __future__ import annotations

import logging
import sys
from contextvars import ContextVar
from typing import Any

import structlog
from opentelemetry import trace
from redis import Redis
from redis.exceptions import RedisError

from worker.settings import Settings
from worker.telemetry.log_privacy import LogPrivacy, describe_error
from worker.telemetry.pseudonyms import Pseudonyms, load_pseudonyms

__all__ = [
    "QUIET_LOGGERS",
    "bind_event",
    "clear_context",
    "configure_logging",
    "end_event",
    "event_ids",
    "install_pseudonyms",
    "start_event",
    "use_pseudonyms",
]

QUIET_LOGGERS = ("httpx", "httpcore")  # request lines carry full URLs (query secrets included)
# The process's one privacy processor (logging is process-wide): configure_logging installs it, and
# use_pseudonyms gives it the key once the process has read it from the settings or Redis.
_PRIVACY = LogPrivacy()


# The ids of the event a drain is running (eventId, scopeKey, attempt, then chainId and sourceId), one dict per
# event in one context variable: set once when the event starts and dropped when it ends. structlog's own
# bind_contextvars makes and sets a context variable per key, twice per event (ten sets and five resets):
# ~2% of a drained event's instructions (decisions.md "Half the work per event").
_EVENT: ContextVar[dict[str, Any] | None] = ContextVar("agent_signal_event_ids", default=None)


def _merge_event_ids(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    ids = _EVENT.get()
    if ids:
        for key, value in ids.items():
            event_dict.setdefault(key, value)
    return event_dict


def _add_trace_ids(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    ctx = trace.get_current_span().get_span_context()
    if ctx.is_valid:
        event_dict.setdefault("trace_id", f"{ctx.trace_id:032x}")
        event_dict.setdefault("span_id", f"{ctx.span_id:016x}")
    return event_dict


def configure_logging(*, env: str = "production", level: str = "INFO", fmt: str = "auto") -> None:
    """Route stdlib logging through structlog's processors; JSON unless development (or ``fmt`` says)."""
    console = fmt == "console" or (fmt == "auto" and env == "development")
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        _merge_event_ids,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.PositionalArgumentsFormatter(),
        _add_trace_ids,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Any = (
        structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
        if console
        else structlog.processors.JSONRenderer()
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, structlog.stdlib.ExtraAdder(), _PRIVACY],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            renderer,
        ],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    structlog.configure(
        processors=[*shared, _PRIVACY, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )


def use_pseudonyms(pseudonyms: Pseudonyms | None) -> None:
    """Name ids in this process's log lines by these pseudonyms (None: ``(hidden)``)."""
    _PRIVACY.use(pseudonyms)


def install_pseudonyms(client: Redis, settings: Settings) -> None:
    """Read the deployment's pseudonym key (the setting, else Redis; worker/telemetry/pseudonyms.py) for this process's
    log lines; at boot, once Redis answers. When it cannot be read, ids stay ``(hidden)``."""
    try:
        use_pseudonyms(load_pseudonyms(client, settings))
    except (RedisError, ValueError) as exc:
        logging.getLogger(__name__).warning(
            "pseudonym key not read (%s): ids in logs are hidden", describe_error(exc)
        )


def bind_event(**values: Any) -> None:
    """Bind an event's identifiers for every log line until cleared."""
    structlog.contextvars.bind_contextvars(**{k: v for k, v in values.items() if v is not None})


def start_event(**values: Any) -> dict[str, Any]:
    """Name the event this thread now runs in every log line until :func:`end_event` (None values left out);
    the returned dict is the event's: :func:`event_ids` adds to it."""
    ids = {k: v for k, v in values.items() if v is not None}
    _EVENT.set(ids)
    return ids


def event_ids(**values: Any) -> None:
    """Add ids to the running event's (what it learned after it started: its chain, its source)."""
    ids = _EVENT.get()
    if ids is not None:
        ids.update({k: v for k, v in values.items() if v is not None})


def end_event() -> None:
    """The event ended: its ids leave the log lines."""
    _EVENT.set(None)


def clear_context(*keys: str) -> None:
    if keys:
        structlog.contextvars.unbind_contextvars(*keys)
    else:
        structlog.contextvars.clear_contextvars()
