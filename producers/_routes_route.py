"""``POST /v1/route``: the routing decision, answered synchronously (and recorded as a chat.request event)."""

from __future__ import annotations

import json
import uuid

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from policies.routing import ConfigError, NoDecisionsConfigured, ReloadingRouter, validate_route_input
from producers._web_common import error_response, producer_of, settings_of

__all__ = ["router"]

router = APIRouter()


def _holder(request: Request) -> ReloadingRouter | None:
    holder: ReloadingRouter | None = getattr(request.app.state, "router", None)
    if holder is None and settings_of(request).router_config:
        holder = ReloadingRouter(settings_of(request).router_config or "")
        request.app.state.router = holder
    return holder


@router.post("/v1/route")
async def post_route(request: Request) -> JSONResponse:
    """``{"request", "protocol"?, "externalSignals"?, "requestId"?, "scopeKey"?}`` → RouteResult."""
    holder = _holder(request)
    if holder is None:
        return error_response(
            503, "router_not_configured", "set AGENT_SIGNAL_ROUTER_CONFIG to a router YAML file"
        )
    try:
        body = json.loads(await request.body())
    except (ValueError, UnicodeDecodeError) as exc:
        return error_response(422, "invalid_json", f"request body is not valid JSON: {exc}")
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
    if settings_of(request).route_record_events:
        _record(request, body, chat, protocol, external)
    return JSONResponse(result)


def _record(
    request: Request,
    body: dict[str, object],
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
