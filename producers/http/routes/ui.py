"""What the web UI reads besides the public API: conversations as seen in events, and the operations
overview. Also serves the UI itself (``/`` and ``/ui/*``, vendored files only: no CDN)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from pydantic import BaseModel, Field

from policies.conversation_log import in_time_order
from producers.http.access.principal import Principal, check_user, principal_of, public, require, tenant_keys
from producers.http.api_models import API_ERRORS
from producers.http.read_memo import ReadMemo
from producers.http.web_common import error_response, producer_of
from worker.core.clock import now_ms
from worker.keys.layout import Keys
from worker.ops.runs import every_index, source_types, window_start_ms
from worker.ops.workers_view import workers_seen
from worker.store.scripts import SERIES_MINUTES

__all__ = ["UI_DIR", "router"]

router = APIRouter(responses=API_ERRORS, tags=["ui"])
Reader = Annotated[Principal, Depends(require("read", users=True))]
UI_DIR = Path(__file__).resolve().parents[2] / "ui"  # producers/ui/: the browser files
UI_FILES = {
    "app.js": "text/javascript",
    "app.css": "text/css",
    "examples.js": "text/javascript",
    "cells.js": "text/javascript",
    "conversation.js": "text/javascript",
    "runs.js": "text/javascript",
    "run_detail.js": "text/javascript",
    "chains.js": "text/javascript",
    "dlq.js": "text/javascript",
    "send.js": "text/javascript",
    "scopes.js": "text/javascript",
    "overview.js": "text/javascript",
}


class Conversation(BaseModel):
    userId: str
    agentId: str
    topicId: str
    lastAt: int = Field(description="Unix milliseconds of its latest event.")


class ConversationList(BaseModel):
    conversations: list[Conversation] = Field(description="Most recent first.")


class ConversationMessages(BaseModel):
    messages: list[Any] = Field(description="The conversation's messages as its events carried them.")


class QueueDepth(BaseModel):
    name: str
    eventsWaiting: int = Field(
        description="The tenant's events accepted and not yet done or dead (the broker holds one drain message "
        "per scope, so its own length is not the backlog, and RabbitMQ's is not in Redis at all)."
    )
    activeScopes: int


class WorkerSeen(BaseModel):
    name: str
    lastSeenAt: int = Field(description="Unix milliseconds.")
    alive: bool = Field(
        description="Its heartbeat is at most four reconcile intervals old on the service's clock: the rule of the "
        "agent_signal_workers gauge. A worker killed without its shutdown hook stays listed, not alive, for an hour."
    )
    inFlight: int = Field(description="Drains of this tenant's scopes the worker holds now.")
    concurrency: int | None = Field(default=None, description="Child processes (when the worker said).")


class MinutePoint(BaseModel):
    minute: int = Field(description="The minute's start, Unix milliseconds.")
    done: float
    avgLatencyMs: float | None


class Overview(BaseModel):
    statusCounts: dict[str, int]
    bySourceType: dict[str, dict[str, float]] = Field(description="source type → status → count.")
    queues: list[QueueDepth]
    deadLetters: int
    workers: list[WorkerSeen]
    series: list[MinutePoint] = Field(description="The last hour, one point per minute.")


@router.get("/", include_in_schema=False, dependencies=[Depends(public)])
def index() -> FileResponse:
    return FileResponse(UI_DIR / "index.html", media_type="text/html")


@router.get("/ui/{name}", include_in_schema=False, dependencies=[Depends(public)])
def asset(name: str) -> Response:
    if name not in UI_FILES:
        return error_response(404, "not_found", f"no UI file {name!r}")
    return FileResponse(UI_DIR / name, media_type=UI_FILES[name])


@router.get("/v1/conversations", response_model=ConversationList)
def list_conversations(
    request: Request, principal: Reader, limit: Annotated[int, Query(ge=1, le=500)] = 50
) -> JSONResponse:
    """Conversations seen in events, most recent first: ``{"conversations": [{userId, agentId, topicId, lastAt}]}``
    (a user token sees its own user's only); ``limit`` 1 to 500 (a 422 names it otherwise)."""
    store, keys = producer_of(request).store, tenant_keys(request)
    index = keys.conversations if principal.user_id is None else keys.user_conversations(principal.user_id)
    rows: list[Any] = list(store.client.zrevrange(index, 0, limit - 1, withscores=True))
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


@router.get("/v1/conversations/messages", response_model=ConversationMessages)
def conversation_messages(
    request: Request, principal: Reader, userId: str = "", agentId: str = "", topicId: str = ""
) -> JSONResponse:
    # named: the first of the three the query left out (a walk: it named userId always)
    for name, value in (("userId", userId), ("agentId", agentId), ("topicId", topicId)):
        if not value:
            return error_response(
                422, "missing_field", f"{name} is required (userId, agentId and topicId)", name
            )
    check_user(principal, userId, "conversation")
    client = producer_of(request).store.client
    raw = client.lrange(tenant_keys(request).conversation(userId, agentId, topicId), 0, -1)
    return JSONResponse({"messages": in_time_order(raw)})  # logged as processed, shown as written


_RUNS_CHUNK = 1000


def _runs_by_type(client: Any, keys: Keys, since_ms: int) -> dict[str, dict[str, float]]:
    """Source type → status → count over the tenant's runs indexes (the type and status indexes, which together
    hold every event: every process's events within the dedupe window, ``run_index_max`` of each type besides
    the active ones and of each status), so the table agrees with the Runs page; an event found in two of them
    is counted once.
    Cost: one ZRANGE and one pipelined HMGET of two fields per 1,000 runs (10,000 runs: 60-100 ms in all,
    measured against the embedded Redis; the UI asks every 10 s)."""
    out: dict[str, dict[str, float]] = {}
    buckets = keys.every_bucket()
    types = source_types(client, buckets, since_ms)
    for bucket in buckets:
        seen: set[str] = set()
        for index in every_index(bucket, types[bucket.bucket_prefix]):
            for start in range(0, int(client.zcard(index)), _RUNS_CHUNK):
                ids = [_text(i) for i in client.zrevrange(index, start, start + _RUNS_CHUNK - 1)]
                ids = [i for i in ids if i not in seen]
                seen.update(ids)
                pipe = client.pipeline(transaction=False)
                for event_id in ids:
                    pipe.hmget(bucket.event(event_id), "state", "sourceType")
                for state, source_type in pipe.execute():
                    if state is None:  # expired: its index entry is stale
                        continue
                    counts = out.setdefault("unknown" if source_type is None else _text(source_type), {})
                    counts[_text(state)] = counts.get(_text(state), 0) + 1
    return out


def _text(value: str | bytes) -> str:
    return value if isinstance(value, str) else value.decode()


@router.get("/v1/overview", response_model=Overview)
def overview(request: Request, caller: Annotated[Principal, Depends(require("read"))]) -> JSONResponse:
    """Counts by source type and status (the runs index), the tenant's counters (its stats hash), queue depth,
    workers seen, and the last hour per minute: all read from the store, whichever process did the work."""
    producer, keys = producer_of(request), tenant_keys(request)
    store = producer.store
    client = store.client
    now_min = now_ms() // 60_000
    # the store's runs, not this process's telemetry; read once at a time per tenant and kept in proportion to
    # its cost (a tenant at its quota takes a second of Redis per read: producers/http/read_memo.py)
    memo: ReadMemo[dict[str, dict[str, float]]] = request.app.state.overview_memo
    by_type = memo.get(
        principal_of(request).tenant, lambda: _runs_by_type(client, keys, window_start_ms(store.settings))
    )
    points: dict[int, dict[str, float]] = {}
    for bucket in keys.every_bucket():  # with scope buckets, each bucket's series, summed
        stale = []
        for raw_field, raw_value in client.hgetall(bucket.series).items():
            field = str(raw_field if isinstance(raw_field, str) else raw_field.decode())
            minute_text, _, kind = field.partition(":")
            minute = int(minute_text)
            if minute < now_min - SERIES_MINUTES:
                stale.append(field)
                continue
            point = points.setdefault(minute, {})
            point[kind] = point.get(kind, 0.0) + float(raw_value)
        if stale:
            client.hdel(bucket.series, *stale)
    series = []
    for minute in range(now_min - SERIES_MINUTES + 1, now_min + 1):
        p = points.get(minute, {})
        done = p.get("done", 0.0)
        series.append(
            {
                "minute": minute * 60_000,
                "done": done,
                "avgLatencyMs": (p.get("latency_ms", 0.0) / done) if done else None,
            }
        )
    stats = store.stats(keys)
    return JSONResponse(
        {
            "statusCounts": stats,
            "bySourceType": by_type,
            "queues": [
                {
                    "name": producer.settings.queue_name,
                    "eventsWaiting": max(stats.get("queued", 0), 0),
                    "activeScopes": len(store.active_scopes(keys)),
                }
            ],
            "deadLetters": store.dlq_size(keys),
            "workers": workers_seen(store, keys),
            "series": series,
        }
    )
