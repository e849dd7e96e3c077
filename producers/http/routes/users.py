"""``DELETE /v1/users/{userId}``: erase everything the caller's tenant stores about one user (worker/ops/erasure.py).

Once the erasure is done the user's open streams end (``: user erased``) and every token of the user issued before
it is refused (worker/ops/credentials.py, ``end_user_tokens``): a token that erases its own user does nothing
after that, so one end user cannot loop "erase myself, send again" to start their share of the tenant's events
over. One erasure runs at a time per tenant: another meanwhile is 429 ``rate_limited`` with ``Retry-After``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from producers.http.api_models import API_ERRORS
from producers.http.auth import credentials_of
from producers.http.principal import Principal, check_user, require, tenant_keys
from producers.http.web_common import error_response, producer_of
from sessions.store import session_scope
from worker.core.ids import StoredUserId
from worker.ops.erasure import ErasureRunning, erase_user
from worker.store.receipts import ERASED

__all__ = ["router"]

router = APIRouter(responses=API_ERRORS, tags=["users"])


class Erasure(BaseModel):
    userId: str
    removed: dict[str, int] = Field(description="How many of each kind of record were erased.")
    busyScopes: int = Field(
        description="Scopes with an event running now, left for the next call (call again)."
    )


@router.delete("/v1/users/{user_id:path}", response_model=Erasure)
def delete_user(
    user_id: StoredUserId,
    request: Request,
    principal: Annotated[Principal, Depends(require("operate", users=True))],
) -> JSONResponse:
    """Erase the user (idempotent): ``{"userId", "removed": {kind: n}, "busyScopes": n}``. A scope with an
    event running right now is left for the next call (``busyScopes`` > 0: call again); the answer is 200
    either way. A user token may erase its own user only, and is refused afterwards (as is every token of the
    user issued before the erasure): the app mints a new one. While another erasure of the tenant runs: 429
    ``rate_limited`` with ``Retry-After``."""
    check_user(principal, user_id, "user")
    producer = producer_of(request)
    keys = tenant_keys(request)
    try:
        report = erase_user(
            producer.store, keys, user_id, session_scope=session_scope, erasers=producer.erasers
        )
    except ErasureRunning as exc:
        response = error_response(429, "rate_limited", str(exc))
        response.headers["Retry-After"] = str(exc.retry_after_s)
        return response
    producer.store.client.publish(keys.receipts_feed(user_id), ERASED)  # the user's open streams end
    credentials_of(request).end_user_tokens(principal.tenant, user_id)  # then the user's tokens do
    return JSONResponse(report.to_json_dict())
