"""``GET /v1/receipts``: one user's receipts (across agents and topics, or one agent's, or one topic's),
newest first, with a cursor."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse

from producers.http.access.principal import Principal, check_user, require, tenant_keys
from producers.http.api_models import API_ERRORS, ReceiptPage
from producers.http.web_common import error_response, producer_of, settings_of
from worker.store.receipts import ReceiptStore

__all__ = ["router"]

router = APIRouter(responses=API_ERRORS, tags=["receipts"])
MAX_LIMIT = 50
CURSOR = re.compile(r"-?[0-9]{1,18}:.+", re.DOTALL)  # "<createdAt>:<id>", as list() returns it


def receipt_store(request: Request) -> ReceiptStore:
    """The caller's tenant's receipts."""
    client = producer_of(request).store.client
    return ReceiptStore(client, tenant_keys(request), ttl_s=settings_of(request).receipt_retention_s)


@router.get("/v1/receipts", response_model=ReceiptPage)
def get_receipts(
    request: Request,
    principal: Annotated[Principal, Depends(require("read", users=True))],
    userId: str | None = None,
    agentId: str | None = None,
    topicId: str | None = None,
    sinceCreatedAt: int | None = None,
    limit: Annotated[int, Query(json_schema_extra={"minimum": 1, "maximum": MAX_LIMIT})] = 20,
    cursor: Annotated[str | None, Query(description="The previous page's ``cursor``.")] = None,
) -> JSONResponse:
    """The user's receipts, newest first: ``userId`` alone lists every agent's and topic's; ``agentId`` and
    ``topicId`` narrow them (both: LobeHub's ``listReceipts``). A user token reads only its own user's (it may
    leave ``userId`` out, as on the stream). ``sinceCreatedAt`` is inclusive (clients dedupe by id); ``cursor``
    comes from the previous page; ``limit`` is 1..50, default 20."""
    userId = userId or principal.user_id
    if not userId:
        return error_response(422, "missing_field", "userId is required (a key reads any user's)", "userId")
    check_user(principal, userId, "receipts")
    if not 1 <= limit <= MAX_LIMIT:
        return error_response(422, "invalid_field", f"limit must be between 1 and {MAX_LIMIT}", "limit")
    if cursor is not None and CURSOR.fullmatch(cursor) is None:
        return error_response(422, "invalid_field", "cursor is not one this API returned", "cursor")
    receipts, next_cursor = receipt_store(request).list(
        user_id=userId,
        agent_id=agentId or None,
        topic_id=topicId or None,
        since_created_at=sinceCreatedAt,
        limit=limit,
        cursor=cursor,
    )
    body: dict[str, object] = {"receipts": receipts}
    if next_cursor:
        body["cursor"] = next_cursor
    return JSONResponse(body)
