"""``POST /v1/route``: the routing decision, answered synchronously (and recorded as a chat.request event).

The record never turns a routed request into an error after the fact. The caller's own ids (``requestId``,
which becomes the event's ``sourceId``, and ``scopeKey``, ``userId``, ``agentId``, ``workspaceId``) follow
the id rule (worker/ids.py) and are checked before routing: a bad one is a 422 naming it, and nothing is
routed or recorded. Anything else the record may hit (a payload over ``AGENT_SIGNAL_MAX_EVENT_BYTES``, a
source type the deployment does not admit) is not the caller's mistake: the route is still answered, the
record is skipped, and the answer says so in ``Agent-Signal-Record-Error`` (and the log names the reason).
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from policies.conversation import RoutingDeps, RoutingSettings
from policies.routing import ConfigError, NoDecisionsConfigured, ReloadingRouter, validate_route_input
from producers._principal import Principal, require, tenant_producer
from producers._web_common import JsonObject, error_response, producer_of
from worker.ids import ID_MAX_LENGTH, id_problem
from worker.intake import InvalidEvent

__all__ = ["RECORD_ERROR_HEADER", "router"]

log = logging.getLogger(__name__)
router = APIRouter()
RECORD_ERROR_HEADER = "Agent-Signal-Record-Error"
CALLER_IDS = ("requestId", "scopeKey", "userId", "agentId", "workspaceId")


def _holder(request: Request) -> ReloadingRouter | None:
    """The routing plugin's router (one per process, shared with the plugin's handlers)."""
    return producer_of(request).deps.get(RoutingDeps).router


@router.post("/v1/route")
def post_route(
    request: Request, body: JsonObject, _: Annotated[Principal, Depends(require("ingest"))]
) -> JSONResponse:
    """``{"request", "protocol"?, "externalSignals"?, "requestId"?, "scopeKey"?}`` → RouteResult.

    A plain ``def``: routing is CPU work (and a config reload reads a file), so it runs in the threadpool."""
    holder = _holder(request)
    if holder is None:
        return error_response(
            503, "router_not_configured", "set AGENT_SIGNAL_ROUTER_CONFIG to a router YAML file"
        )
    if isinstance(body, JSONResponse):
        return body
    try:
        chat, protocol, external = validate_route_input(body)
    except ValueError as exc:
        field, message = exc.args
        return error_response(422, "invalid_field", message, field)
    bad_id = _caller_id_error(body)
    if bad_id is not None:
        return bad_id
    try:
        result = holder.get().route(chat, protocol, external)
    except ConfigError as exc:
        return error_response(503, "router_config_invalid", "; ".join(exc.errors))
    except NoDecisionsConfigured as exc:
        return error_response(503, "no_decisions", str(exc))
    response = JSONResponse(result)
    if producer_of(request).runtime.settings_for(RoutingSettings).route_record_events:
        failure = _record(request, _event(body, chat, protocol, external))
        if failure is not None:
            response.headers[RECORD_ERROR_HEADER] = failure
    return response


def _caller_id_error(body: dict[str, Any]) -> JSONResponse | None:
    """The 422 for the first of the caller's ids that breaks the id rule, or None."""
    for name in CALLER_IDS:
        value = body.get(name)
        problem = id_problem(value) if isinstance(value, str) and value else None
        if problem is not None:
            return error_response(422, "invalid_field", f"{name}: {problem.message}", name)
    return None


def _event(
    body: dict[str, Any], chat: dict[str, object], protocol: str, external: list[dict[str, object]]
) -> dict[str, object]:
    """The chat.request event that records this routing call."""
    request_id = body.get("requestId")
    source_id = request_id if isinstance(request_id, str) and request_id else f"route:{uuid.uuid4().hex}"
    event: dict[str, object] = {
        "sourceType": "chat.request",
        "sourceId": source_id,
        "payload": {"request": chat, "protocol": protocol, "externalSignals": external},
    }
    for key in ("scopeKey", "userId", "agentId", "workspaceId"):
        if isinstance(body.get(key), str) and body[key]:
            event[key] = body[key]
    if "scopeKey" not in event:  # routing calls do not need to queue behind each other
        scope = f"route:{source_id}"
        too_long = len(scope) > ID_MAX_LENGTH
        event["scopeKey"] = f"route:{hashlib.sha256(source_id.encode()).hexdigest()}" if too_long else scope
    return event


def _record(request: Request, event: dict[str, object]) -> str | None:
    """Enqueue the record; None, or the error code when the event cannot be stored (logged, not raised)."""
    try:
        tenant_producer(request).enqueue(event)  # recorded in the caller's tenant
    except InvalidEvent as exc:
        error = exc.error
        log.warning(
            "POST /v1/route: answered, but its chat.request record was refused: %s (%s)",
            error.code,
            error.message,
        )
        return error.code
    return None
