"""What the web UI reads besides the public API: conversations as seen in events, and the operations
overview. Also serves the UI itself (``/`` and ``/ui/*``, vendored files only: no CDN)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import FileResponse, JSONResponse, Response

from producers._principal import Principal, check_user, public, require, tenant_producer
from producers._web_common import error_response
from worker.keys import Keys

__all__ = ["UI_DIR", "router"]

router = APIRouter()
Reader = Annotated[Principal, Depends(require("read", users=True))]
UI_DIR = Path(__file__).resolve().parent / "ui"
UI_FILES = {"app.js": "text/javascript", "app.css": "text/css"}


@router.get("/", include_in_schema=False, dependencies=[Depends(public)])
def index() -> FileResponse:
    return FileResponse(UI_DIR / "index.html", media_type="text/html")


@router.get("/ui/{name}", include_in_schema=False, dependencies=[Depends(public)])
def asset(name: str) -> Response:
    if name not in UI_FILES:
        return error_response(404, "not_found", f"no UI file {name!r}")
    return FileResponse(UI_DIR / name, media_type=UI_FILES[name])


@router.get("/v1/conversations")
def list_conversations(request: Request, principal: Reader, limit: int = 50) -> JSONResponse:
    """Conversations seen in events, most recent first: ``{"conversations": [{userId, agentId, topicId, lastAt}]}``
    (a user token sees its own user's only)."""
    store = tenant_producer(request).store
    index = (
        store.keys.conversations
        if principal.user_id is None
        else store.keys.user_conversations(principal.user_id)
    )
    rows: list[Any] = list(store.client.zrevrange(index, 0, max(1, min(limit, 500)) - 1, withscores=True))
    out = []
    for row in rows:
        member, score = row[0], float(row[1])
        text = str(member if isinstance(member, str) else member.decode())
        parts = text.split("\x1f")
        if len(parts) != 3:  # written before ids were checked: skip it rather than fail the whole list
            continue
        user, agent, topic = parts
        out.append({"userId": user, "agentId": agent, "topicId": topic, "lastAt": int(score)})
    return JSONResponse({"conversations": out})


@router.get("/v1/conversations/messages")
def conversation_messages(
    request: Request, principal: Reader, userId: str = "", agentId: str = "", topicId: str = ""
) -> JSONResponse:
    if not (userId and agentId and topicId):
        return error_response(422, "missing_field", "userId, agentId and topicId are required", "userId")
    check_user(principal, userId, "conversation")
    store = tenant_producer(request).store
    raw = store.client.lrange(store.keys.conversation(userId, agentId, topicId), 0, -1)
    return JSONResponse({"messages": [json.loads(m) for m in raw]})


def _metric_series(client: Any, keys: Keys, name: str) -> dict[str, float]:
    fields = client.hgetall(keys.metric(name))
    out: dict[str, float] = {}
    for raw_field, value in fields.items():
        text = str(raw_field if isinstance(raw_field, str) else raw_field.decode())
        labels, _, part = text.rpartition("|")
        if part == "value":
            out[labels] = float(value)
    return out


@router.get("/v1/overview")
def overview(request: Request, caller: Annotated[Principal, Depends(require("read"))]) -> JSONResponse:
    """Counts by source type and status, queue depth, workers seen, and the last hour per minute."""
    producer = tenant_producer(request)
    store = producer.store
    client = store.client
    now_min = int(time.time() // 60)
    by_type: dict[str, dict[str, float]] = {}
    for labels, value in _metric_series(client, store.keys, "agent_signal_source_events_total").items():
        attrs = json.loads(labels)
        if attrs.get("tenant", "default") != store.tenant:  # the series is deployment-wide: this tenant's part
            continue
        source_type = attrs.get("agent.signal.source_type", "?")
        status = attrs.get("agent.signal.source_event_status", "?")
        by_type.setdefault(source_type, {})[status] = by_type.get(source_type, {}).get(status, 0) + value
    series_raw = client.hgetall(store.keys.series)
    stale = []
    points: dict[int, dict[str, float]] = {}
    for raw_field, raw_value in series_raw.items():
        field = str(raw_field if isinstance(raw_field, str) else raw_field.decode())
        value = float(raw_value)
        minute_text, _, kind = field.partition(":")
        minute = int(minute_text)
        if minute < now_min - 60:
            stale.append(field)
            continue
        points.setdefault(minute, {})[kind] = value
    if stale:
        client.hdel(store.keys.series, *stale)
    series = []
    for minute in range(now_min - 59, now_min + 1):
        p = points.get(minute, {})
        done = p.get("done", 0.0)
        series.append(
            {
                "minute": minute * 60_000,
                "done": done,
                "avgLatencyMs": (p.get("latency_ms", 0.0) / done) if done else None,
            }
        )
    queue_key = store.keys.broker_queue(producer.settings.queue_name)
    workers = {
        (k if isinstance(k, str) else k.decode()): int(v)
        for k, v in client.hgetall(store.keys.workers).items()
    }
    return JSONResponse(
        {
            "statusCounts": store.stats(),
            "bySourceType": by_type,
            "queues": [
                {
                    "name": producer.settings.queue_name,
                    "depth": int(client.llen(queue_key)),
                    "activeScopes": len(store.active_scopes()),
                }
            ],
            "deadLetters": store.dlq_size(),
            "workers": [{"name": k, "lastSeenAt": v} for k, v in sorted(workers.items())],
            "series": series,
        }
    )
