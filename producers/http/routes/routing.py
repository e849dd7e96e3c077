"""``POST /v1/route``: the routing decision, answered synchronously (and recorded as a chat.request event that
carries the answer itself, so the recorded decision is the one the caller got, whatever the workers' config).

The record never turns a routed request into an error after the fact. The caller's own ids (``requestId``,
which becomes the event's ``sourceId``, and ``scopeKey``, ``userId``, ``agentId``, ``workspaceId``) follow
the id rule (worker/core/ids.py) and are checked before routing: a bad one is a 422 naming it, and nothing is
routed or recorded. Anything else the record may hit (a payload over ``AGENT_SIGNAL_MAX_EVENT_BYTES``, a
source type the deployment does not admit) is not the caller's mistake: the route is still answered, the
record is skipped, and the answer says so in ``Agent-Signal-Record-Error`` (and the log names the reason).
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from policies.conversation import RoutingDeps, RoutingSettings
from policies.routing import (
    MAX_EXTERNAL_SIGNALS,
    RECORD_FIELDS,
    ROUTE_REQUEST_FIELDS,
    ConfigError,
    InvalidRouteInput,
    NoDecisionsConfigured,
    ReloadingRouter,
    validate_route_input,
)
from producers.http.access.principal import Principal, require
from producers.http.api_models import API_ERRORS, RouteResult, body_route, example
from producers.http.records import RECORD_ERROR_DOC, RECORD_ERROR_HEADER, enqueue_record, with_record_error
from producers.http.web_common import JsonObject, error_response, producer_of
from worker.core.ids import ID_MAX_LENGTH, Id, IdProblem, NameId, UserId, id_problem, user_id_problem

__all__ = ["RECORD_ERROR_HEADER", "router"]

log = logging.getLogger(__name__)
router = APIRouter(responses=API_ERRORS, tags=["routing"])
CALLER_IDS = RECORD_FIELDS


class ExternalSignal(BaseModel):
    """A signal computed by the caller: matched unless it carries ``error``."""

    model_config = ConfigDict(extra="allow")
    type: str = Field(min_length=1, pattern=r"\S")
    name: str = Field(min_length=1, pattern=r"\S")
    confidence: float | None = Field(
        default=None, ge=0, le=1, allow_inf_nan=False, description="From 0 to 1; 1.0 when absent."
    )
    value: float | None = Field(default=None, allow_inf_nan=False, description="Feeds predicate leaves.")
    error: str | None = Field(default=None, description="Feeds ``on_error``; the signal is then not matched.")


class ChatRequest(BaseModel):
    """The chat request in the protocol's own shape (``messages``, ``input``, ``tools``, …)."""

    model_config = ConfigDict(extra="allow")
    model: str | None = Field(default=None, description='Absent or ``"auto"``: the decision\'s model.')


class RouteRequest(BaseModel):
    """``POST /v1/route`` (read by :func:`policies.routing.validate_route_input`, which names the field)."""

    model_config = ConfigDict(extra="forbid")
    request: ChatRequest
    protocol: Literal["openai-chat", "anthropic-messages", "openai-responses"] = "openai-chat"
    externalSignals: list[ExternalSignal] = Field(
        default_factory=list,
        max_length=MAX_EXTERNAL_SIGNALS,
        description="Signals computed by the caller; none may name a rule of the router config.",
    )
    requestId: Id | None = Field(default=None, description="The chat.request event's sourceId.")
    scopeKey: Id | None = Field(default=None, description="The record's scope (default: one of its own).")
    userId: UserId | None = None
    agentId: NameId | None = None
    workspaceId: NameId | None = None


def _holder(request: Request) -> ReloadingRouter | None:
    """The routing plugin's router (one per process, shared with the plugin's handlers)."""
    return producer_of(request).deps.get(RoutingDeps).router


@router.post(
    "/v1/route",
    response_model=RouteResult,
    **body_route(
        RouteRequest,
        responses={200: {"headers": {RECORD_ERROR_HEADER: RECORD_ERROR_DOC}}},
        examples={
            "chat": example(
                "An OpenAI chat request with model auto",
                {
                    "request": {
                        "model": "auto",
                        "messages": [{"role": "user", "content": "Summarise this thread."}],
                    },
                    "protocol": "openai-chat",
                },
            )
        },
    ),
)
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
        chat, protocol, external = validate_route_input(body, known_keys=ROUTE_REQUEST_FIELDS)
    except InvalidRouteInput as exc:
        return error_response(422, exc.code, exc.message, exc.field)
    bad_input = _caller_id_error(body)
    if bad_input is not None:
        return bad_input
    try:
        router = holder.get()
        result = router.route(chat, protocol, external)
    except InvalidRouteInput as exc:
        return error_response(422, exc.code, exc.message, exc.field)
    except ConfigError as exc:
        return error_response(503, "router_config_invalid", "; ".join(exc.errors))
    except NoDecisionsConfigured as exc:
        return error_response(503, "no_decisions", str(exc))
    response = JSONResponse(result)
    if producer_of(request).runtime.settings_for(RoutingSettings).route_record_events:
        answered = {"routeResult": result, "configFingerprint": router.fingerprint}
        event = _event(body, {"request": chat, "protocol": protocol, "externalSignals": external, **answered})
        with_record_error(response, enqueue_record(request, event, what="chat.request"))
    return response


def _caller_id_error(body: dict[str, Any]) -> JSONResponse | None:
    """The 422 for the first of the caller's ids that is not a string or breaks the id rule (a number or a list
    was dropped and the record went out under ids of its own), or None. Keys the body may not have are refused
    by :func:`validate_route_input` (``known_keys``)."""
    for name in CALLER_IDS:
        value = body.get(name)
        if value is None:
            continue
        problem = (
            _id_problem(name, value)
            if isinstance(value, str)
            else IdProblem("characters", "must be a string")
        )
        if problem is not None:
            return error_response(422, "invalid_field", f"{name}: {problem.message}", name)
    return None


def _id_problem(name: str, value: str) -> IdProblem | None:
    """The rule of the record's field: a user id's, a name's (agent, workspace), else the id rule (request id,
    scope key), so that a record the event layer would refuse is refused here, before anything is routed."""
    if name == "userId":
        return user_id_problem(value)
    return id_problem(value, name=name in ("agentId", "workspaceId"))


def _event(body: dict[str, Any], payload: dict[str, Any]) -> dict[str, object]:
    """The chat.request event that records this routing call: the route input, the RouteResult as answered
    (``routeResult``, which the handler emits instead of routing again with whatever config the worker has by
    then) and the fingerprint of the config that answered (``configFingerprint``)."""
    request_id = body.get("requestId")
    given = request_id if isinstance(request_id, str) and request_id else None
    source_id = given or f"route:{uuid.uuid4().hex}"
    if payload.get("configFingerprint") is None:
        payload = {k: v for k, v in payload.items() if k != "configFingerprint"}
    event: dict[str, object] = {"sourceType": "chat.request", "sourceId": source_id, "payload": payload}
    for key in ("scopeKey", "userId", "agentId", "workspaceId"):
        if isinstance(body.get(key), str) and body[key]:
            event[key] = body[key]
    if "scopeKey" not in event:  # routing calls do not need to queue behind each other
        scope = f"route:{source_id}" if given else source_id  # a made-up id is route:<uuid> already
        too_long = len(scope) > ID_MAX_LENGTH
        event["scopeKey"] = f"route:{hashlib.sha256(source_id.encode()).hexdigest()}" if too_long else scope
    return event
