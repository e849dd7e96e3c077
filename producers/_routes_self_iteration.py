"""Self-iteration over HTTP: the reference store (memories, skill documents), receipt rollback, the receipts
stream (server-sent events) and the per-user feature gate."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated

import anyio
from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from policies.self_iteration.deps import SelfIterationDeps
from policies.self_iteration.documents import DocumentStore
from policies.self_iteration.gate import set_override
from producers._routes_receipts import receipt_store
from producers._web_common import error_response, json_body, producer_of, settings_of
from worker.receipts import ReceiptStore
from worker.redis_client import async_redis_from_settings

__all__ = ["router"]

router = APIRouter()


def _docs(request: Request) -> DocumentStore:
    store = producer_of(request).store
    return DocumentStore(store.client, store.keys)


@router.get("/v1/memories")
def list_memories(request: Request, userId: str = "") -> JSONResponse:
    if not userId:
        return error_response(422, "missing_field", "userId is required", "userId")
    return JSONResponse({"memories": _docs(request).list_memories(userId)})


@router.get("/v1/memories/{memory_id}")
def get_memory(memory_id: str, request: Request, userId: str = "") -> JSONResponse:
    memory = _docs(request).get_memory(userId, memory_id) if userId else None
    if memory is None:
        return error_response(404, "not_found", f"no memory {memory_id!r} for user {userId!r}")
    return JSONResponse(memory)


@router.get("/v1/skills")
def list_skills(request: Request, userId: str = "", agentId: str = "") -> JSONResponse:
    if not userId or not agentId:
        return error_response(
            422, "missing_field", "userId and agentId are required", "userId" if not userId else "agentId"
        )
    return JSONResponse({"skills": _docs(request).list_skills(userId, agentId)})


@router.get("/v1/skills/{document_id}")
def get_skill(document_id: str, request: Request, userId: str = "", agentId: str = "") -> JSONResponse:
    doc = _docs(request).get_skill(userId, agentId, document_id) if userId and agentId else None
    if doc is None:
        return error_response(404, "not_found", f"no skill document {document_id!r}")
    return JSONResponse(doc)


@router.post("/v1/receipts/{receipt_id:path}/rollback")
def rollback_receipt(receipt_id: str, request: Request) -> JSONResponse:
    """Undo a skill-document receipt: rolled_back | conflict | not_found | failed | unsupported (kept on the receipt)."""
    receipts = receipt_store(request)
    receipt = receipts.get(receipt_id)
    if receipt is None:
        return JSONResponse({"status": "not_found"}, status_code=404)
    metadata = receipt.get("metadata") or {}
    status: str
    if receipt.get("kind") != "skill" or not metadata.get("documentId") or not metadata.get("historyId"):
        status = "unsupported"
    elif metadata.get("expectedCurrentDocumentUpdatedAt") is None:
        status = "conflict"
    else:
        status = _docs(request).rollback(
            str(receipt.get("userId")),
            str(receipt.get("agentId")),
            str(metadata["documentId"]),
            str(metadata["historyId"]),
            int(metadata["expectedCurrentDocumentUpdatedAt"]),
        )
    updated = receipts.update_metadata(receipt_id, {"rollbackStatus": status})
    return JSONResponse({"status": status, "receipt": updated})


@router.get("/v1/receipts/stream")
def stream_receipts(request: Request, userId: str = "", agentId: str = "-", topicId: str = "-") -> Response:
    """Server-sent events: ``event: receipt`` with the receipt JSON, once per new receipt; a comment every 15 s.

    The stream listens with ``redis.asyncio`` on its own connection (a subscription holds one), so waiting
    for the next message never blocks the event loop; reading a receipt goes through a worker thread."""
    if not userId:
        return error_response(422, "missing_field", "userId is required", "userId")
    store = producer_of(request).store
    channel = store.keys.receipts_feed(userId, agentId or "-", topicId or "-")
    events = _receipt_events(request, channel, receipt_store(request))
    return StreamingResponse(events, media_type="text/event-stream", headers={"cache-control": "no-cache"})


async def _receipt_events(request: Request, channel: str, receipts: ReceiptStore) -> AsyncIterator[bytes]:
    client = async_redis_from_settings(settings_of(request))
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    sent: set[str] = set()
    idle_s = 0.0
    try:
        await pubsub.subscribe(channel)
        yield b": connected\n\n"
        while not await request.is_disconnected():
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.5)
            if message is None:
                idle_s += 0.5
                if idle_s >= 15:
                    idle_s = 0.0
                    yield b": keep-alive\n\n"
                continue
            receipt_id = str(message["data"])
            if receipt_id in sent:
                continue
            receipt = await asyncio.to_thread(receipts.get, receipt_id)
            if receipt is None:
                continue
            sent.add(receipt_id)
            data = json.dumps(receipt, ensure_ascii=False)
            yield f"event: receipt\nid: {receipt_id}\ndata: {data}\n\n".encode()
    finally:
        with anyio.CancelScope(shield=True):  # a client that goes away cancels the stream; still close
            await pubsub.aclose()  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
            await client.aclose()


class GateBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    enabled: bool | None = Field(strict=True)


@router.put("/v1/features/self-iteration/{user_id}")
def put_gate(
    user_id: str, request: Request, body: Annotated[GateBody | JSONResponse, Depends(json_body(GateBody))]
) -> JSONResponse:
    """``{"enabled": true|false}`` overrides the gate for one user; ``null`` removes the override."""
    if isinstance(body, JSONResponse):
        return body
    store = producer_of(request).store
    set_override(store.client, store.keys, user_id, body.enabled)
    enabled = producer_of(request).deps.get(SelfIterationDeps).enabled(user_id)
    return JSONResponse({"userId": user_id, "enabled": enabled})
