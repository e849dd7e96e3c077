"""Scopes: ``GET /v1/scopes?state=busy|waiting|stuck|paused&limit=&cursor=`` and ``POST
/v1/scopes/{scopeKey}/pause`` / ``resume`` (worker/ops/scope_control.py). Scope keys hold ``:`` and may hold ``/``,
so the path takes the rest."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from producers.http.access.principal import Principal, require, tenant_keys
from producers.http.api_models import SHARED_ERRORS
from producers.http.web_common import error_response, producer_of
from worker.core.ids import SCOPE_KEY_MAX_LENGTH, scope_key_problem
from worker.ops.scope_control import TooManyPaused, pause_scope, resume_scope, scope_page

__all__ = ["router"]


router = APIRouter(tags=["scopes"], responses=SHARED_ERRORS)  # the shared error answers (OpenAPI)

ScopeState = Literal["busy", "waiting", "stuck", "paused"]


class ScopeRow(BaseModel):
    scopeKey: str
    state: ScopeState = Field(
        description="``paused``; ``busy`` (a worker holds its lease); ``waiting`` (queued, its drain scheduled); "
        "``stuck`` (queued events and no live drain scheduled)."
    )
    inboxDepth: int = Field(description="Events waiting in its inbox.")
    paused: bool
    leaseHolder: str | None = Field(default=None, description="The worker holding its lease, while one does.")
    headAgeMs: int | None = Field(default=None, description="How long its oldest queued event has waited.")
    pausedAt: int | None = Field(default=None, description="Unix milliseconds, while paused.")


class ScopeList(BaseModel):
    """By scope key; ``cursor`` (when present) continues the listing: more scopes follow this page."""

    scopes: list[ScopeRow]
    cursor: str | None = Field(
        default=None, description="The page's last scope key, when more follow: the next page's ``cursor``."
    )
    total: int = Field(description="The scopes in this state (all states without ``state``) on every page.")


class ScopeControl(BaseModel):
    """The scope's paused flag now; ``changed`` is false when it already was."""

    scopeKey: str
    paused: bool
    changed: bool


@router.get("/v1/scopes", response_model=ScopeList)
def get_scopes(
    request: Request,
    _: Annotated[Principal, Depends(require("read"))],
    state: ScopeState | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
    cursor: Annotated[
        str | None, Query(max_length=SCOPE_KEY_MAX_LENGTH, description="The previous page's ``cursor``.")
    ] = None,
) -> JSONResponse:
    """The tenant's scopes with queued events, and its paused ones, by scope key: ``scopeKey``, ``state``,
    ``inboxDepth``, ``paused``, ``leaseHolder`` (the worker holding the lease: its node name) while one holds it, ``headAgeMs`` while one
    waits. ``cursor`` is set when more scopes follow the page (pass it back to continue); ``total`` counts them
    all."""
    page = scope_page(
        producer_of(request).store, tenant_keys(request), state, limit=limit, after=cursor or None
    )
    body: dict[str, Any] = {"scopes": page.scopes, "total": page.total}
    if page.cursor is not None:
        body["cursor"] = page.cursor
    return JSONResponse(body)


def _checked(scope_key: str) -> JSONResponse | None:
    """The 422 for what cannot be a scope key (worker/core/ids.py: derived ones run past an id's length), or
    None."""
    problem = scope_key_problem(scope_key)
    if problem is None:
        return None
    return error_response(422, "invalid_field", f"scopeKey {problem.message}", "scopeKey")


@router.post("/v1/scopes/{scope_key:path}/pause", response_model=ScopeControl)
def post_pause(
    scope_key: str, request: Request, principal: Annotated[Principal, Depends(require("operate"))]
) -> JSONResponse:
    """Its events wait in its inbox (the one in flight finishes) until it is resumed; other scopes run on."""
    if (refused := _checked(scope_key)) is not None:
        return refused
    try:
        store, keys = producer_of(request).store, tenant_keys(request)
        changed = pause_scope(store, keys, scope_key, actor=principal.actor)
    except TooManyPaused as exc:
        return error_response(429, "quota_exceeded", str(exc), "scopeKey")
    return JSONResponse({"scopeKey": scope_key, "paused": True, "changed": changed})


@router.post("/v1/scopes/{scope_key:path}/resume", response_model=ScopeControl)
def post_resume(
    scope_key: str, request: Request, principal: Annotated[Principal, Depends(require("operate"))]
) -> JSONResponse:
    """Its queued events run again, in order: its drain is re-published through the fair queue."""
    if (refused := _checked(scope_key)) is not None:
        return refused
    producer = producer_of(request)
    keys, actor = tenant_keys(request), principal.actor
    changed = resume_scope(producer.store, keys, scope_key, producer.fair.publish, actor=actor)
    return JSONResponse({"scopeKey": scope_key, "paused": False, "changed": changed})
