"""Self-iteration over HTTP: the reference store (memories, skill documents), receipt rollback, the receipts
stream (server-sent events) and the per-user feature gate."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from policies.self_iteration.gate import self_iteration_enabled, set_override
from producers._routes_receipts import receipt_store
from producers._web_common import error_response, parse_body, producer_of, settings_of
from worker.documents import DocumentStore

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
async def stream_receipts(request: Request, userId: str = "", agentId: str = "-", topicId: str = "-") -> Any:
    """Server-sent events: ``event: receipt`` with the receipt JSON, once per new receipt; a comment every 15 s."""
    if not userId:
        return error_response(422, "missing_field", "userId is required", "userId")
    store = producer_of(request).store
    channel = store.keys.receipts_feed(userId, agentId or "-", topicId or "-")
    receipts = receipt_store(request)

    async def events() -> AsyncIterator[bytes]:
        pubsub = store.client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
        pubsub.subscribe(channel)
        sent: set[str] = set()
        idle_s = 0.0
        try:
            yield b": connected\n\n"
            while not await request.is_disconnected():
                message = await asyncio.to_thread(pubsub.get_message, timeout=0.5)
                if message is None:
                    idle_s += 0.5
                    if idle_s >= 15:
                        idle_s = 0.0
                        yield b": keep-alive\n\n"
                    continue
                receipt_id = message["data"] if isinstance(message["data"], str) else message["data"].decode()
                if receipt_id in sent:
                    continue
                receipt = receipts.get(receipt_id)
                if receipt is None:
                    continue
                sent.add(receipt_id)
                yield f"event: receipt\nid: {receipt_id}\ndata: {json.dumps(receipt, ensure_ascii=False)}\n\n".encode()
        finally:
            pubsub.close()

    return StreamingResponse(events(), media_type="text/event-stream", headers={"cache-control": "no-cache"})


class GateBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    enabled: bool | None = Field(strict=True)


@router.put("/v1/features/self-iteration/{user_id}")
async def put_gate(user_id: str, request: Request) -> JSONResponse:
    """``{"enabled": true|false}`` overrides the gate for one user; ``null`` removes the override."""
    body = await parse_body(request, GateBody)
    if isinstance(body, JSONResponse):
        return body
    store = producer_of(request).store
    set_override(store.client, store.keys, user_id, body.enabled)
    enabled = self_iteration_enabled(
        store.client, store.keys, settings_of(request).self_iteration_enabled, user_id
    )
    return JSONResponse({"userId": user_id, "enabled": enabled})
