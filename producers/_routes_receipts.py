"""``GET /v1/receipts``: receipts of a user/agent/topic, newest first, with a cursor."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from producers._principal import Principal, check_user, require, tenant_producer
from producers._web_common import error_response, settings_of
from worker.receipts import ReceiptStore

__all__ = ["router"]

router = APIRouter()
MAX_LIMIT = 50


def receipt_store(request: Request) -> ReceiptStore:
    """The caller's tenant's receipts."""
    store = tenant_producer(request).store
    return ReceiptStore(store.client, store.keys, ttl_s=settings_of(request).receipt_retention_s)


@router.get("/v1/receipts")
def get_receipts(
    request: Request,
    principal: Annotated[Principal, Depends(require("read", users=True))],
    userId: str | None = None,
    agentId: str | None = None,
    topicId: str | None = None,
    sinceCreatedAt: int | None = None,
    limit: int = 20,
    cursor: str | None = None,
) -> JSONResponse:
    """``sinceCreatedAt`` is inclusive (clients dedupe by id); ``cursor`` comes from the previous page; ``limit``
    is 1..50, default 20 (LobeHub's ``listReceipts``)."""
    if not userId:
        return error_response(422, "missing_field", "userId is required", "userId")
    check_user(principal, userId, "receipts")
    if not 1 <= limit <= MAX_LIMIT:
        return error_response(422, "invalid_field", f"limit must be between 1 and {MAX_LIMIT}", "limit")
    if cursor is not None and ":" not in cursor:
        return error_response(422, "invalid_field", "cursor is not one this API returned", "cursor")
    receipts, next_cursor = receipt_store(request).list(
        user_id=userId,
        agent_id=agentId or "-",
        topic_id=topicId or "-",
        since_created_at=sinceCreatedAt,
        limit=limit,
        cursor=cursor,
    )
    body: dict[str, object] = {"receipts": receipts}
    if next_cursor:
        body["cursor"] = next_cursor
    return JSONResponse(body)
