"""``POST /v1/route``: the routing decision, answered synchronously (and recorded as a chat.request event)."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from policies.conversation import RoutingDeps, RoutingSettings
from policies.routing import ConfigError, NoDecisionsConfigured, ReloadingRouter, validate_route_input
from producers._web_common import JsonObject, error_response, producer_of

__all__ = ["router"]

router = APIRouter()


def _holder(request: Request) -> ReloadingRouter | None:
    """The routing plugin's router (one per process, shared with the plugin's handlers)."""
    return producer_of(request).deps.get(RoutingDeps).router


@router.post("/v1/route")
def post_route(request: Request, body: JsonObject) -> JSONResponse:
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
    try:
        result = holder.get().route(chat, protocol, external)
    except ConfigError as exc:
        return error_response(503, "router_config_invalid", "; ".join(exc.errors))
    except NoDecisionsConfigured as exc:
        return error_response(503, "no_decisions", str(exc))
    if producer_of(request).runtime.settings_for(RoutingSettings).route_record_events:
        _record(request, body, chat, protocol, external)
    return JSONResponse(result)


def _record(
    request: Request,
    body: dict[str, Any],
    chat: dict[str, object],
    protocol: str,
    external: list[dict[str, object]],
) -> None:
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
    if "scopeKey" not in event:
        event["scopeKey"] = f"route:{source_id}"  # routing calls do not need to queue behind each other
    producer_of(request).enqueue(event)
