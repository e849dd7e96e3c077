"""Self-iteration over HTTP: the reference store (memories, skill documents), receipt rollback, the receipts
stream (server-sent events) and the per-user feature gate."""

from __future__ import annotations

from functools import partial
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from sse_starlette import ServerSentEvent

from policies.self_iteration.deps import SelfIterationDeps
from policies.self_iteration.gate import set_override
from policies.self_iteration.records.documents import DocumentStore
from policies.self_iteration.records.rollback import rollback_skill_receipt
from producers.http.access.principal import LOCAL_PRINCIPAL, Principal, check_user, require, tenant_keys
from producers.http.api_models import API_ERRORS, ErrorBody, Receipt, body_route, error_responses, example
from producers.http.routes.receipts import receipt_store
from producers.http.streams.credential import stream_credential
from producers.http.streams.receipts import ReceiptFilter, receipt_events
from producers.http.streams.response import FeedResponse, feed_of
from producers.http.web_common import error_response, json_body, producer_of, settings_of
from worker.core.ids import Id, NameId, user_id_problem
from worker.store.receipts import ReceiptStore

__all__ = ["router"]

router = APIRouter(responses=API_ERRORS, tags=["self-iteration"])


class Memory(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str
    layer: str
    title: str
    summary: str
    sourceId: str
    createdAt: int = Field(description="Unix milliseconds.")


class MemoryList(BaseModel):
    memories: list[Memory] = Field(description="Newest first.")


class SkillDocument(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str
    agentDocumentId: str
    title: str
    content: str
    createdAt: int = Field(description="Unix milliseconds.")
    updatedAt: int = Field(description="Unix milliseconds.")
    version: int
    sourceId: str
    restoredFrom: str | None = Field(default=None, description="The history id a rollback restored.")


class SkillList(BaseModel):
    skills: list[SkillDocument] = Field(description="Most recently updated first.")


RollbackStatus = Literal["rolled_back", "conflict", "not_found", "failed", "unsupported"]


class Rollback(BaseModel):
    status: RollbackStatus
    receipt: Receipt | None = Field(default=None, description="The receipt, with its ``rollbackStatus``.")


class RollbackNotFound(ErrorBody):
    """The error body (``not_found``), plus LobeHub's rollback status for a receipt it cannot find."""

    status: Literal["not_found"]


class GateState(BaseModel):
    userId: str
    enabled: bool = Field(description="Whether self-iteration runs for the user (override, else default).")


Reader = Annotated[Principal, Depends(require("read", users=True))]
Operator = Annotated[Principal, Depends(require("operate", users=True))]
UserQuery = Annotated[
    str,
    Query(
        description="The user: required with an API key; a user token's own user when absent (a user token "
        "naming another user is answered 404)."
    ),
]
AgentQuery = Annotated[str, Query(description="The agent whose skill documents to read (required).")]


def _docs(request: Request) -> DocumentStore:
    return DocumentStore(producer_of(request).store.client, tenant_keys(request))


def _user(principal: Principal, user_id: str, what: str) -> str | JSONResponse:
    """The user a route serves: a user token's own (``userId`` may name it; another user is 404, as
    :func:`check_user` answers everywhere), else the query's ``userId`` (absent: 422 ``missing_field``)."""
    if principal.user_id is not None:
        check_user(principal, user_id or principal.user_id, what)
        return principal.user_id
    if not user_id:
        return error_response(422, "missing_field", "userId is required", "userId")
    return user_id


def _missing_agent() -> JSONResponse:
    return error_response(422, "missing_field", "agentId is required", "agentId")


@router.get("/v1/memories", response_model=MemoryList)
def list_memories(request: Request, principal: Reader, userId: UserQuery = "") -> JSONResponse:
    user = _user(principal, userId, "memories")
    if isinstance(user, JSONResponse):
        return user
    return JSONResponse({"memories": _docs(request).list_memories(user)})


@router.get("/v1/memories/{memory_id}", response_model=Memory)
def get_memory(memory_id: Id, request: Request, principal: Reader, userId: UserQuery = "") -> JSONResponse:
    user = _user(principal, userId, "memory")
    if isinstance(user, JSONResponse):
        return user
    memory = _docs(request).get_memory(user, memory_id)
    if memory is None:
        return error_response(404, "not_found", f"user {user!r} has no memory {memory_id!r}", "memoryId")
    return JSONResponse(memory)


@router.get("/v1/skills", response_model=SkillList)
def list_skills(
    request: Request, principal: Reader, agentId: AgentQuery, userId: UserQuery = ""
) -> JSONResponse:
    user = _user(principal, userId, "skills")
    if isinstance(user, JSONResponse):
        return user
    if not agentId:
        return _missing_agent()
    return JSONResponse({"skills": _docs(request).list_skills(user, agentId)})


@router.get("/v1/skills/{document_id}", response_model=SkillDocument)
def get_skill(
    document_id: Id, request: Request, principal: Reader, agentId: AgentQuery, userId: UserQuery = ""
) -> JSONResponse:
    user = _user(principal, userId, "skill document")
    if isinstance(user, JSONResponse):
        return user
    if not agentId:
        return _missing_agent()
    doc = _docs(request).get_skill(user, agentId, document_id)
    if doc is None:
        message = f"no skill document {document_id!r} of agent {agentId!r} for user {user!r}"
        return error_response(404, "not_found", message)
    return JSONResponse(doc)


def _no_receipt(receipt_id: str) -> JSONResponse:
    """The rollback's 404: the error body, plus ``"status": "not_found"`` (LobeHub's rollback status for a
    receipt it cannot find). Another user's receipt answers the same: its existence is not revealed."""
    message = f"no receipt {receipt_id!r} (unknown, expired, or not the caller's)"
    error = {"code": "not_found", "message": message, "field": None}
    return JSONResponse({"error": error, "status": "not_found"}, status_code=404)


@router.post(
    "/v1/receipts/{receipt_id:path}/rollback",
    response_model=Rollback,
    responses={
        404: {
            "model": RollbackNotFound | ErrorBody,
            "description": "No such receipt, or not the caller's (the error body with ``status``); or no such "
            "path (the error body).",
        },
        409: {
            "model": ErrorBody,
            "description": "``ambiguous_receipt_id``: an API key gave no ``userId`` and several users have a "
            "receipt with this id (``field`` is ``userId``).",
        },
    },
)
def rollback_receipt(
    receipt_id: Id,
    request: Request,
    principal: Operator,
    userId: Annotated[
        str,
        Query(
            description="The receipt's user: a user token's own when absent (a user token naming another user "
            "is answered 404); an API key without it is answered when exactly one user has a receipt with this "
            "id (409 ``ambiguous_receipt_id`` when several do)."
        ),
    ] = "",
) -> JSONResponse:
    """Undo a skill-document receipt: rolled_back | conflict | not_found | failed | unsupported (kept on the
    receipt). A receipt is one user's: a user token's own, else ``userId``'s (a key that names no user is
    answered when exactly one user has a receipt with this id; give ``userId``, it is cheaper)."""
    receipts = receipt_store(request)
    if principal.user_id is not None and userId not in ("", principal.user_id):
        return _no_receipt(receipt_id)
    user = principal.user_id or userId or None
    if user is None:
        owners = receipts.owners_of(receipt_id)
        if len(owners) > 1:
            message = f"receipt {receipt_id!r} exists for {len(owners)} users: give userId"
            return error_response(409, "ambiguous_receipt_id", message, "userId")
        user = owners[0] if owners else None
    if user is None or (receipt := receipts.get(user, receipt_id)) is None:
        return _no_receipt(receipt_id)
    status = rollback_skill_receipt(_docs(request), receipt)
    updated = receipts.update_metadata(user, receipt_id, {"rollbackStatus": status})
    return JSONResponse({"status": status, "receipt": updated})


PING_S = 15  # the keep-alive comment's interval; the credential is checked at least this often


@router.get(
    "/v1/receipts/stream",
    response_class=Response,
    responses={
        200: {
            "description": "Server-sent events",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        },
        **error_responses(429),
    },
)
def stream_receipts(
    request: Request, principal: Reader, userId: UserQuery = "", agentId: str = "-", topicId: str = "-"
) -> Response:
    """Server-sent events: ``: connected`` once the subscription is live, then ``event: receipt`` with the
    receipt JSON once per new receipt (``id:`` its id, without control characters), ``event: resync`` when the
    client fell behind, the server lost its Redis connection, or right after ``: connected`` when the request
    carries ``Last-Event-ID`` (a reconnect: re-read ``GET /v1/receipts``), and a ``: keep-alive`` comment every
    15 s. The credential is checked again while the stream is open (every ``AGENT_SIGNAL_AUTH_CACHE_S``, kept
    within 1 to 15 s): the stream ends, after a ``: credential no longer valid`` comment, once its key or its
    token's issuing key is revoked, and when a user token expires.

    Every stream of the process shares one Redis subscriber (producers/http/streams/feed.py); open streams are capped
    per credential, per process and per tenant across processes (429 ``too_many_streams`` with Retry-After,
    answered by FeedResponse when it starts). A user token streams only its own user's receipts (another
    userId answers 404)."""
    user = _user(principal, userId, "receipts stream")
    if isinstance(user, JSONResponse):
        return user
    keys = producer_of(request).store.keys.for_tenant(principal.tenant)
    settings = settings_of(request)
    receipts = ReceiptStore(producer_of(request).store.client, keys, ttl_s=settings.receipt_retention_s)
    wanted = ReceiptFilter(user, _narrowing(agentId), _narrowing(topicId))
    events = partial(
        receipt_events,
        receipts=receipts,
        wanted=wanted,
        credential=stream_credential(request, principal, PING_S),
        reconnected="last-event-id" in request.headers,
    )
    return FeedResponse(
        feed_of(request),
        keys.receipts_feed(user),
        principal.credential_id,
        events,
        unavailable_retry_after_s=settings.store_retry_after_s,
        # counted per tenant across processes (AGENT_SIGNAL_TENANT_MAX_STREAMS) once credentials exist
        tenant=None if principal == LOCAL_PRINCIPAL else principal.tenant,
        headers={"cache-control": "no-cache"},
        ping=PING_S,
        sep="\n",
        ping_message_factory=lambda: ServerSentEvent(comment="keep-alive", sep="\n"),
    )


def _narrowing(value: str) -> str | None:
    """A stream's ``agentId``/``topicId``: ``-`` or empty (the default) is every agent's / topic's."""
    return None if value in ("", "-") else value


class GateBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    enabled: bool | None = Field(strict=True)


@router.put(
    "/v1/features/self-iteration/{user_id:path}",
    response_model=GateState,
    **body_route(
        GateBody, examples={"on": example("Turn self-iteration on for the user", {"enabled": True})}
    ),
)
def put_gate(
    user_id: NameId,
    request: Request,
    body: Annotated[GateBody | JSONResponse, Depends(json_body(GateBody))],
    principal: Operator,
) -> JSONResponse:
    """``{"enabled": true|false}`` overrides the gate for one user; ``null`` removes the override."""
    check_user(principal, user_id, "feature gate")  # before the body: another user's gate is simply not there
    if isinstance(body, JSONResponse):
        return body
    if body.enabled is not None and (problem := user_id_problem(user_id)) is not None:
        # a user id of before the rule (worker/core/ids.py): its override may be removed, not set
        return error_response(422, "invalid_id", f"userId {problem.message}", "userId")
    client, keys = producer_of(request).store.client, tenant_keys(request)
    set_override(client, keys, user_id, body.enabled)
    enabled = producer_of(request).deps.get(SelfIterationDeps).enabled(user_id, keys)
    return JSONResponse({"userId": user_id, "enabled": enabled})
