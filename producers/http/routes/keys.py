"""API keys and user tokens over HTTP: ``/v1/keys`` (admin) and ``POST /v1/tokens`` (operate or admin key).

An ``admin`` key manages the keys of its own tenant: another tenant's is 403 to create or list and 404 to
revoke (its existence is not revealed). The operator's root credentials (the bootstrap key, or the local
caller when none is configured) manage every tenant's keys, so a platform can onboard tenants over HTTP. A user
token holds no ``admin`` grant and cannot mint tokens.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictInt

from producers.http.access.auth import credentials_of, is_root
from producers.http.access.principal import Forbidden, NotFound, Principal, require
from producers.http.api_models import API_ERRORS, BODY_ERRORS, ErrorBody, example
from producers.http.web_common import StrictJsonRoute, error_response
from worker.core.ids import Id, UserId
from worker.keys.layout import BadTenant, check_tenant
from worker.ops.credentials import DEFAULT_TOKEN_TTL_S, MAX_TOKEN_TTL_S, CredentialError
from worker.ops.key_index import TenantBeingDeleted, TooManyKeys
from worker.ops.roles import KeyRole

__all__ = ["router"]

# Bodies are decoded by the door's decoder (too deep, NaN, a number too long: 422 invalid_json), while FastAPI's body
# parameters keep KeyRequest and TokenRequest in the OpenAPI document (the TypeScript client's types name them).
router = APIRouter(tags=["credentials"], responses=API_ERRORS, route_class=StrictJsonRoute)


class KeyRequest(BaseModel):
    """``POST /v1/keys``: the tenant defaults to the caller's."""

    model_config = ConfigDict(extra="forbid")

    tenant: str | None = Field(default=None, min_length=1)  # absent: the caller's; "" is not a tenant
    role: KeyRole
    name: str = Field(default="", max_length=100)


class CreatedKey(BaseModel):
    """The new key; ``key`` (the secret) is shown only in this answer."""

    id: str
    tenant: str
    role: str
    key: str
    name: str


class KeyRecord(BaseModel):
    """A key as listed (no secret, no hash)."""

    id: str
    tenant: str
    role: str
    name: str
    createdAt: int = Field(description="Unix milliseconds.")
    revokedAt: int | None = Field(default=None, description="Unix milliseconds, once revoked.")


class KeyList(BaseModel):
    keys: list[KeyRecord]


class TokenRequest(BaseModel):
    """``POST /v1/tokens``: a user token for ``userId`` of the caller's tenant, valid ``ttlS`` seconds."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    user_id: UserId = Field(alias="userId")
    ttl_s: StrictInt = Field(default=DEFAULT_TOKEN_TTL_S, alias="ttlS", ge=1, le=MAX_TOKEN_TTL_S)


class MintedToken(BaseModel):
    token: str
    expiresAt: int  # ms since the epoch


def _tenant_for(principal: Principal, tenant: str | None) -> str:
    """The tenant the caller asked for, if it may manage it (403 otherwise)."""
    wanted = tenant or principal.tenant
    if wanted != principal.tenant and not is_root(principal):
        raise Forbidden("an admin key manages only the keys of its own tenant")
    return wanted


_BEING_DELETED: dict[int | str, dict[str, Any]] = {
    409: {
        "model": ErrorBody,
        "description": "``tenant_being_deleted``: ``DELETE /v1/tenants/{tenant}`` is under way.",
    }
}


@router.post(
    "/v1/keys", status_code=201, response_model=CreatedKey, responses={**BODY_ERRORS, **_BEING_DELETED}
)
def create_key(
    request: Request,
    body: Annotated[
        KeyRequest,
        Body(
            openapi_examples={
                "read": example("A read key for a dashboard", {"role": "read", "name": "dashboard"})
            }
        ),
    ],
    principal: Annotated[Principal, Depends(require("admin"))],
) -> JSONResponse:
    tenant = _tenant_for(principal, body.tenant)
    try:
        record, secret = credentials_of(request).create(tenant, body.role, body.name, actor=principal.actor)
    except TooManyKeys as exc:  # AGENT_SIGNAL_TENANT_MAX_KEYS: room again once a key is revoked
        return error_response(429, "quota_exceeded", str(exc), exc.field)
    except TenantBeingDeleted as exc:  # DELETE /v1/tenants/{tenant} under way
        return error_response(409, "tenant_being_deleted", str(exc), exc.field)
    except CredentialError as exc:
        return error_response(422, "invalid_field", str(exc), exc.field)
    created = CreatedKey(id=record.id, tenant=record.tenant, role=record.role, key=secret, name=record.name)
    return JSONResponse(created.model_dump(), status_code=201)


@router.get("/v1/keys", response_model=KeyList)
def list_keys(
    request: Request,
    principal: Annotated[Principal, Depends(require("admin"))],
    tenant: str | None = None,
) -> JSONResponse:
    """The keys of the caller's tenant, without secrets; the root credentials list ``tenant``'s, or without it
    every tenant's (as ``agent-signal keys list`` does against the store)."""
    if tenant is not None:
        try:
            check_tenant(tenant)
        except BadTenant as exc:  # no tenant can have that name: not an empty list
            return error_response(422, "invalid_field", f"tenant: {exc}", "tenant")
    wanted = None if tenant is None and is_root(principal) else _tenant_for(principal, tenant)
    return JSONResponse({"keys": [r.public() for r in credentials_of(request).list(wanted)]})


@router.delete("/v1/keys/{key_id}", response_model=KeyRecord)
def revoke_key(
    key_id: Id, request: Request, principal: Annotated[Principal, Depends(require("admin"))]
) -> JSONResponse:
    """Revoke a key of the caller's tenant (idempotent); its user tokens stop working too."""
    store = credentials_of(request)
    record = store.read(key_id) if key_id.startswith("key_") else None
    if record is None or (record.tenant != principal.tenant and not is_root(principal)):
        raise NotFound(f"no key {key_id!r}")
    revoked = store.revoke(key_id, actor=principal.actor)
    assert revoked is not None  # it existed a moment ago, and keys are never deleted
    return JSONResponse(revoked.public())


@router.post("/v1/tokens", response_model=MintedToken, responses=BODY_ERRORS)
def mint_token(
    request: Request,
    body: Annotated[
        TokenRequest,
        Body(
            openapi_examples={
                "hour": example("A token for user u1, valid an hour", {"userId": "u1", "ttlS": 3600})
            }
        ),
    ],
    principal: Annotated[Principal, Depends(require("operate"))],
) -> JSONResponse:
    """A user token for ``userId``: it reads and changes only that user's data, and stamps its events."""
    if principal.is_user:
        raise Forbidden("a user token cannot mint tokens; use an operate or admin key")
    try:
        token, expires_at = credentials_of(request).mint_user_token(
            principal.tenant, body.user_id, body.ttl_s, principal.actor
        )
    except CredentialError as exc:
        return error_response(422, "invalid_field", str(exc), exc.field)
    return JSONResponse({"token": token, "expiresAt": expires_at})
