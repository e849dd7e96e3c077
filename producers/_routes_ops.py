"""Operations: chains, the dead-letter list, health, readiness and metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from producers._client import Producer
from producers._ops import redrive_events
from producers._web_common import JsonObject, error_response, producer_of
from worker.metrics_store import render_prometheus
from worker.store_safety import current_safety, safety_gauges

__all__ = ["router"]

router = APIRouter()


@router.get("/v1/chains/{chain_id:path}")
def get_chain(chain_id: str, request: Request) -> JSONResponse:
    chain = producer_of(request).store.get_chain(chain_id)
    if chain is None:
        return error_response(404, "not_found", f"no chain {chain_id!r} (not run yet, or past retention)")
    return JSONResponse(chain)


@router.get("/v1/dlq")
def get_dlq(request: Request, offset: int = 0, limit: int = 50) -> JSONResponse:
    store = producer_of(request).store
    limit = max(1, min(limit, 500))
    return JSONResponse(
        {"events": store.dlq_list(offset=max(offset, 0), limit=limit), "total": store.dlq_size()}
    )


@router.post("/v1/dlq/redrive")
def post_redrive(request: Request, body: JsonObject) -> JSONResponse:
    """``{"eventIds": [...]}`` or ``{"all": true}``."""
    if isinstance(body, JSONResponse):
        return body
    ids = body.get("eventIds")
    redrive_all = body.get("all") is True
    if not redrive_all and (not isinstance(ids, list) or not all(isinstance(i, str) for i in ids)):
        return error_response(422, "invalid_field", 'give "eventIds": [..] or "all": true', "eventIds")
    return JSONResponse(redrive_events(producer_of(request), None if redrive_all else ids))


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
def readyz(request: Request) -> JSONResponse:
    """Ready when Redis answers PING, the broker accepts a connection and no store check is an ``error``
    (an evicting policy nobody accepted). ``persistence`` and ``memory`` entries are warnings (still 200)."""
    producer = producer_of(request)
    checks: dict[str, str] = {}
    try:
        producer.store.client.ping()
        checks["redis"] = "ok"
    except Exception as exc:
        checks["redis"] = f"error: {type(exc).__name__}"
    try:
        with producer.app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
        checks["broker"] = "ok"
    except Exception as exc:
        checks["broker"] = f"error: {type(exc).__name__}"
    if checks["redis"] == "ok":  # eviction, persistence, memory: entries only when there is something to say
        checks.update(current_safety(producer.store.client, producer.settings).checks)
    ready = not any(v.startswith("error") for v in checks.values())
    return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)


@router.get("/metrics")
def metrics(request: Request) -> PlainTextResponse:
    """The pipeline's own counters, then every process's OpenTelemetry metrics (aggregated in Redis)."""
    producer = producer_of(request)
    telemetry = getattr(request.app.state, "telemetry", None)
    if telemetry is not None:
        telemetry.flush()  # this process's deltas first, so a scrape right after an enqueue sees it
    text = prometheus_text(producer) + render_prometheus(producer.store.client, producer.store.keys)
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4")


def prometheus_text(producer: Producer) -> str:
    store = producer.store
    stats = store.stats()
    lines = [
        "# HELP agent_signal_events_total Source events by outcome at the door and in the worker.",
        "# TYPE agent_signal_events_total counter",
    ]
    for status in ("accepted", "duplicate", "rejected", "done", "dead", "retried", "redriven"):
        lines.append(f'agent_signal_events_total{{status="{status}"}} {stats.get(status, 0)}')
    lines += [
        "# HELP agent_signal_fence_rejected_total Commits or effects refused because the lease's fence was stale.",
        "# TYPE agent_signal_fence_rejected_total counter",
        f"agent_signal_fence_rejected_total {stats.get('fenceRejected', 0)}",
        "# HELP agent_signal_dlq_size Events in the dead-letter list.",
        "# TYPE agent_signal_dlq_size gauge",
        f"agent_signal_dlq_size {store.dlq_size()}",
        "# HELP agent_signal_active_scopes Scopes with queued events.",
        "# TYPE agent_signal_active_scopes gauge",
        f"agent_signal_active_scopes {len(store.active_scopes())}",
        "# HELP agent_signal_store_unavailable_total Store failures at the door and in the worker's drains.",
        "# TYPE agent_signal_store_unavailable_total counter",
        f"agent_signal_store_unavailable_total {stats.get('storeUnavailable', 0)}",
        *safety_gauges(current_safety(store.client, producer.settings)),
    ]
    return "\n".join(lines) + "\n"
