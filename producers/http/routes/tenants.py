"""``DELETE /v1/tenants/{tenant}``: delete a tenant, everything it stores and its keys (worker/ops/tenant_deletion.py).

Only the operator's root credentials (the bootstrap key; the local caller when none is configured) delete a tenant:
a tenant's own admin key cannot, so a leaked admin key erases users one by one at most, never the tenant at once.
Each call works for at most :data:`CALL_BUDGET_S` and answers where the deletion stands: ``running`` (with
``Retry-After``: call again) or ``done``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from producers.http.access.auth import credentials_of, is_root
from producers.http.access.principal import Forbidden, Principal, require
from producers.http.api_models import API_ERRORS
from producers.http.settings import deletion_settle
from producers.http.web_common import door_of, error_response, settings_of
from worker.keys.layout import BadTenant
from worker.ops.credentials import CredentialError
from worker.ops.tenant_deletion import DEFAULT_BUDGET_S, DeletionRunning, delete_tenant

__all__ = ["router"]

router = APIRouter(responses=API_ERRORS, tags=["credentials"])

CALL_BUDGET_S = DEFAULT_BUDGET_S


class TenantDeletion(BaseModel):
    """Where a tenant's deletion stands after this call."""

    tenant: str
    state: Literal["running", "done"] = Field(description="``running``: call again after ``retryAfterS``.")
    startedAt: int = Field(description="Unix milliseconds: the deletion's first call.")
    keysRevoked: int = Field(description="API keys of the tenant this call revoked.")
    removed: int = Field(description="Redis keys this call removed.")
    removedTotal: int = Field(description="Redis keys removed by every call of this deletion.")
    retryAfterS: int = Field(description="Seconds before calling again (0 once done); also ``Retry-After``.")


@router.delete("/v1/tenants/{tenant}", response_model=TenantDeletion)
def delete_tenant_route(
    tenant: str, request: Request, principal: Annotated[Principal, Depends(require("admin"))]
) -> JSONResponse:
    """Delete ``tenant``: its keys are revoked (with its user tokens), then everything it stores is removed.
    Idempotent and resumable: repeat while ``state`` is ``running``, after ``Retry-After``. The deletion is done
    once a pass over the store found nothing, at least the auth cache window plus the body timeout after the last
    revoke (a request let in before it may still write) and the engine's longest lease or task time limit after
    the first call (work begun before). Meanwhile no key of the tenant can be made (409 ``tenant_being_deleted``),
    nor for an hour after it ended (a message of before could still arrive); then the name starts again from
    nothing. Root credentials only (403 for a tenant's admin key); ``default`` cannot be deleted (422 naming
    ``tenant``); another call deleting the same tenant, or an erasure of one of its users, meanwhile: 429
    ``rate_limited`` with ``Retry-After``."""
    if not is_root(principal):
        raise Forbidden("only the operator's root credentials (the bootstrap key) delete a tenant")
    store = credentials_of(request)
    try:
        progress = delete_tenant(
            store.client,
            store.keys,
            store,
            tenant,
            actor=principal.actor,
            settle=deletion_settle(settings_of(request), door_of(request)),
            budget_s=CALL_BUDGET_S,
        )
    except BadTenant as exc:
        return error_response(422, "invalid_field", f"tenant: {exc}", "tenant")
    except CredentialError as exc:
        return error_response(422, "invalid_field", str(exc), exc.field)
    except DeletionRunning as exc:
        response = error_response(429, "rate_limited", str(exc))
        response.headers["Retry-After"] = str(exc.retry_after_s)
        return response
    response = JSONResponse(progress.public())
    if progress.state == "running":
        response.headers["Retry-After"] = str(progress.retry_after_s)
    return response
