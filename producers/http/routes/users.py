"""``DELETE /v1/users/{userId}``: erase everything the caller's tenant stores about one user (worker/ops/erasure.py)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from producers.http.api_models import API_ERRORS
from producers.http.principal import Principal, check_user, require, tenant_keys
from producers.http.web_common import producer_of
from sessions.store import session_scope
from worker.core.ids import StoredUserId
from worker.ops.erasure import erase_user
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
    either way. A user token may erase its own user only."""
    check_user(principal, user_id, "user")
    producer = producer_of(request)
    keys = tenant_keys(request)
    report = erase_user(producer.store, keys, user_id, session_scope=session_scope, erasers=producer.erasers)
    producer.store.client.publish(keys.receipts_feed(user_id), ERASED)  # the user's open streams end
    return JSONResponse(report.to_json_dict())
