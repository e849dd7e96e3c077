"""The HTTP API's shapes as pydantic models, for ``/openapi.json``: the one error body, the answers several
routers share (Receipt, RouteResult, SessionSettings, ContextView, …) and how a route declares its body.

These models document; the routes keep answering plain ``JSONResponse`` values (FastAPI does not validate a
returned Response), so an answer's shape is decided where it is built and pinned by the integration tests.
``tests/integration/door/test_openapi_schema.py`` calls every operation with generated input and checks each answer
against what is declared here.

Request bodies: most routes read their body through a dependency that hands them the model or the 422 to
answer (producers/http/web_common.py ``json_body``, ``JsonObject``; producers/http/routes/sessions.py
``session_body``), so FastAPI never sees the model. :func:`body_route` declares it for OpenAPI instead: the
model's JSON schema (its ``$defs`` inlined, so the document needs no extra components) as the operation's
``requestBody``, plus the 413/415 answers the door gives any body; given several models (a body that is one of
several shapes), a ``oneOf`` of them. Validation, and its 422 naming the field, stays with the dependency.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "API_ERRORS",
    "BODY_ERRORS",
    "SHARED_ERRORS",
    "AttemptRecord",
    "ContextView",
    "ErrorBody",
    "ErrorDetail",
    "EventState",
    "EventStatus",
    "Receipt",
    "ReceiptPage",
    "RouteResult",
    "SessionSettings",
    "body_route",
    "error_responses",
    "example",
    "json_request_body",
]


# ---- errors ------------------------------------------------------------------------------------------


class ErrorDetail(BaseModel):
    code: str = Field(description="A stable, machine-readable reason (``invalid_field``, ``not_found``, …).")
    message: str = Field(description="What is wrong, for a person.")
    field: str | None = Field(description="The offending field as a dotted path, or null.")


class ErrorBody(BaseModel):
    """Every error answer: ``{"error": {"code", "message", "field"}}``."""

    error: ErrorDetail


_RETRY_AFTER = {
    "Retry-After": {"description": "Seconds to wait before retrying.", "schema": {"type": "integer"}}
}
_ERRORS: dict[int, tuple[str, dict[str, Any]]] = {
    400: ("The Host header is not one this server answers for (``bad_host``).", {}),
    401: ("No credential, or an unknown, revoked, expired or malformed one.", {}),
    403: ("The credential lacks the grant the route needs, or the Origin is refused.", {}),
    404: ("Not found, or not the caller's (another tenant's or another user's): never its data.", {}),
    413: ("The body is over ``AGENT_SIGNAL_MAX_REQUEST_BYTES``, or over one of a session's caps.", {}),
    415: ("A body that is not ``application/json``.", {}),
    422: ("Invalid input; ``field`` names the offending field.", {}),
    429: ("Over the credential's rate, a stream cap, or an inbox or queue limit.", _RETRY_AFTER),
    503: ("The store (or the broker, or the router) is unavailable or busy.", _RETRY_AFTER),
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entries declaring :class:`ErrorBody` for ``statuses``."""
    out: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        description, headers = _ERRORS[status]
        out[status] = {"model": ErrorBody, "description": description}
        if headers:
            out[status]["headers"] = headers
    return out


API_ERRORS = error_responses(400, 401, 403, 404, 422, 429, 503)
"""What any ``/v1`` route may answer besides its own result (the door, auth, validation, the store)."""
BODY_ERRORS = error_responses(413, 415)
"""What the door answers to a body it refuses, before the route runs."""
SHARED_ERRORS = {**API_ERRORS, **BODY_ERRORS}
"""Both, for a router declaring none of its own (events, ops, outbox and scopes declare them where they are made)."""


# ---- declaring a body the route reads itself -----------------------------------------------------------

_DEFS = "#/$defs/"


def _inline(node: Any, defs: dict[str, Any], depth: int = 0) -> Any:
    """``node`` with every ``{"$ref": "#/$defs/X"}`` replaced by X (sibling keywords kept)."""
    if depth > 32:
        raise ValueError("a request model nests too deep to inline (is it recursive?)")
    if isinstance(node, list):
        return [_inline(item, defs, depth + 1) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str) and value.startswith(_DEFS):
            out.update(_inline(defs[value.removeprefix(_DEFS)], defs, depth + 1))
        elif key != "$defs":
            out[key] = _inline(value, defs, depth + 1)
    return out


def _inlined_schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    inlined: dict[str, Any] = _inline(schema, schema.get("$defs", {}))
    return inlined


def example(summary: str, value: Any) -> dict[str, Any]:
    """One entry of an OpenAPI ``examples`` map: what Swagger UI's "Try it out" fills in (the first one) and
    offers in its list. Each is checked against its schema and sent to a real app by
    tests/integration/test_openapi_examples.py, so an example that the server would refuse fails there."""
    return {"summary": summary, "value": value}


def json_request_body(
    model: type[BaseModel] | tuple[type[BaseModel], ...],
    description: str | None = None,
    examples: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """An OpenAPI ``requestBody`` for ``model`` (JSON), or for exactly one of several models (``oneOf``: they
    must not overlap); required when ``{}`` would not do. ``examples``: name -> :func:`example`."""
    models = model if isinstance(model, tuple) else (model,)
    schemas = [_inlined_schema(m) for m in models]
    schema = schemas[0] if len(schemas) == 1 else {"oneOf": schemas}
    media: dict[str, Any] = {"schema": schema}
    if examples:
        media["examples"] = examples
    body: dict[str, Any] = {
        "required": all(bool(s.get("required")) for s in schemas),
        "content": {"application/json": media},
    }
    if description:
        body["description"] = description
    return body


def body_route(
    model: type[BaseModel] | tuple[type[BaseModel], ...],
    description: str | None = None,
    responses: dict[int | str, dict[str, Any]] | None = None,
    examples: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Route decorator keywords for a route reading ``model`` (or one of several models) itself:
    ``openapi_extra`` with its ``requestBody`` (and its ``examples``), and ``responses`` with the door's 413/415
    answers added."""
    return {
        "openapi_extra": {"requestBody": json_request_body(model, description, examples)},
        "responses": {**BODY_ERRORS, **(responses or {})},
    }


# ---- answers several routers share ---------------------------------------------------------------------

_OPEN = ConfigDict(extra="allow")


class Receipt(BaseModel):
    """LobeHub's receipt (what the product shows next to the message that caused it)."""

    model_config = _OPEN

    id: str
    kind: str = Field(description="``memory``, ``skill``, ``review``, ``context``, …")
    status: str
    title: str
    createdAt: int = Field(description="Unix milliseconds.")
    detail: str | None = None
    userId: str | None = None
    agentId: str | None = None
    topicId: str | None = None
    sourceId: str | None = None
    sourceType: str | None = None
    operationId: str | None = None
    anchorMessageId: str | None = None
    triggerMessageId: str | None = None
    target: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None


class ReceiptPage(BaseModel):
    receipts: list[Receipt] = Field(description="Newest first.")
    cursor: str | None = Field(default=None, description="Present when there is a next page.")


class SessionSettings(BaseModel):
    """A session's settings (``userId``, ``agentId``, ``topicId`` present once set)."""

    dmailEnabled: bool
    root: bool
    functions: list[str]
    userId: str | None = None
    agentId: str | None = None
    topicId: str | None = None


class ContextView(BaseModel):
    """The session's context: its messages (checkpoint records are not messages)."""

    messages: list[dict[str, Any]]
    nCheckpoints: int
    tokenCount: int


class RouteFacts(BaseModel):
    hasDeveloperMessage: bool
    userMessageCount: int
    assistantMessageCount: int
    systemMessageCount: int
    toolMessageCount: int
    toolDefinitionCount: int
    toolChoiceRequired: bool
    toolChoiceNone: bool
    assistantToolCallCount: int
    toolResultCount: int
    imageContentCount: int
    lastMessageRole: str
    lastMessageToolResult: bool
    lastMessageFlowToolResult: bool
    lastAssistantToolCall: bool
    lastUserAfterToolResult: bool


class RouteSignal(BaseModel):
    matched: bool
    confidence: float
    value: float | None = None
    error: str | None = Field(default=None, description="An external signal's error (then not matched).")


class RouteDecision(BaseModel):
    name: str
    confidence: float
    matchedRules: list[str] = Field(description='``"<type>:<name>"``; empty for a catch-all or NOT decision.')
    modelRefs: list[dict[str, Any]]


class RouteResult(BaseModel):
    """vLLM Semantic Router's answer: the request's facts, every signal, the decision and the model."""

    facts: RouteFacts
    signals: dict[str, RouteSignal] = Field(description='Keyed ``"<type>:<name>"``.')
    decision: RouteDecision | None
    model: str | None


# ---- events: the status record (runs explorer, run detail, the dead-letter list) ------------------------

EventState = Literal["queued", "processing", "done", "dead", "cancelled", "discarded", "erased"]
"""An event's status: ``erased`` is a queued or running event whose user was erased (it never runs)."""


class AttemptRecord(BaseModel):
    """One attempt of an event, oldest first."""

    attempt: int = Field(description="1, 2, … within its run.")
    run: int = Field(description="0, then one more per redrive.")
    startedAt: int = Field(description="Unix milliseconds.")
    finishedAt: int | None = Field(default=None, description="Unix milliseconds; absent while it runs.")
    status: str = Field(
        description="``running``, ``succeeded``, ``failed``, ``cancelled``, or ``lost`` (its worker vanished)."
    )
    error: str | None = Field(default=None, description="Why the attempt failed.")


class EventStatus(BaseModel):
    """An event's status record (worker/documents/event_records.py). ``scopeKey`` and ``chainId`` are null on an erased
    user's tombstone; the times are Unix milliseconds."""

    eventId: str
    status: EventState
    attempts: int
    chainId: str | None = Field(description="The chain document's id (``GET /v1/chains/{chainId}``).")
    scopeKey: str | None
    enqueuedAt: int
    duplicates: int = Field(description="Later sends with the same dedupe key (answered ``duplicate``).")
    sourceType: str | None = None
    sourceId: str | None = None
    userId: str | None = None
    error: str | None = Field(default=None, description="The last attempt's error.")
    finishedAt: int | None = Field(default=None, description="When it reached done, dead, cancelled.")
    doneAt: int | None = None
    deadAt: int | None = None
    cancelledAt: int | None = None
    cancelRequestedAt: int | None = Field(default=None, description="A running event asked to stop.")
    discardedAt: int | None = None
    discardReason: str | None = None
    editedAt: int | None = Field(default=None, description="Its payload was edited by a redrive.")
    erasedAt: int | None = Field(default=None, description="Its user was erased: a tombstone, no payload.")
    redrivenAt: int | None = None
    redrives: int | None = None
    outOfOrder: bool | None = Field(
        default=None, description="Redriven after later events of its scope: they ran (or run) first."
    )
    attemptsHistory: list[AttemptRecord] | None = Field(default=None, description="Oldest first.")
