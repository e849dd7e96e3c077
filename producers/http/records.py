"""Records of changes already made: the source event a route enqueues after its own write (a routed chat request,
a session's signal, D-Mail, revert). The change is the answer; a refused record must not turn it into an error
after the fact (a 429 for a signal already applied would tell the caller to retry it), so the record is skipped,
logged, and the answer names the refusal's code in ``Agent-Signal-Record-Error``."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse
from redis.exceptions import RedisError

from producers.http.access.principal import principal_of
from producers.http.web_common import producer_of
from worker.core.errors import OverLimit
from worker.intake.source_event import InvalidEvent, StoreUnavailable

__all__ = [
    "OVER_LIMIT_CODES",
    "RECORD_ERROR_DOC",
    "RECORD_ERROR_HEADER",
    "enqueue_record",
    "refused",
    "with_record_error",
]

log = logging.getLogger(__name__)

RECORD_ERROR_HEADER = "Agent-Signal-Record-Error"
RECORD_ERROR_DOC = {
    "description": "Answered, but its record (a source event) was refused: the refusal's code.",
    "schema": {"type": "string"},
}

RECORDED: dict[int | str, dict[str, Any]] = {200: {"headers": {RECORD_ERROR_HEADER: RECORD_ERROR_DOC}}}
"""A recording route's ``responses``: its 200 may name its record's refusal."""

# OverLimit.what -> the 429's error code (the app's handler answers these for the routes that store nothing)
OVER_LIMIT_CODES = {
    "inbox": "inbox_full",
    "tenant": "tenant_queue_full",
    "events": "quota_exceeded",
    "user_events": "quota_exceeded",
    "user_bytes": "quota_exceeded",
    "tenant_bytes": "quota_exceeded",
}


def enqueue_record(request: Request, event: dict[str, Any], *, what: str) -> str | None:
    """Enqueue ``event`` for the caller's tenant; None, or the code of its refusal (logged, not raised): an
    invalid event (too large, a source type the deployment refuses), a limit (inbox, queue, quota), or a store
    that failed after the change was made (``store_unavailable``: the change is not undone, so it is not
    reported as failed). The log names the route's template and the code only: a refusal's message holds ids
    (a user's, a scope's), which logs carry as pseudonymised fields or not at all (docs/security.md)."""
    cause = ""
    try:
        producer_of(request).enqueue(event, tenant=principal_of(request).tenant)
    except InvalidEvent as exc:
        code = exc.error.code
    except OverLimit as exc:
        code = OVER_LIMIT_CODES.get(exc.what, "tenant_queue_full")
    except StoreUnavailable:  # the emitter counted it (note_store_failure)
        code = "store_unavailable"
    except RedisError as exc:  # outside the enqueue script (an admission hook's read): an outage, or a bug
        code, cause = "store_unavailable", f" ({type(exc).__name__})"
    else:
        return None
    return refused(request, what, code, cause)


def refused(request: Request, what: str, code: str, cause: str = "") -> str:
    """Log a record's refusal by the route's template and its ``code`` (never a message: those name users and
    scopes); returns ``code``."""
    route = getattr(request.scope.get("route"), "path", "?")
    log.warning(
        "%s %s: answered, but its %s record was refused: %s%s", request.method, route, what, code, cause
    )
    return code


def with_record_error(response: JSONResponse, failure: str | None) -> JSONResponse:
    """``response``, naming the record's refusal when there was one."""
    if failure is not None:
        response.headers[RECORD_ERROR_HEADER] = failure
    return response
