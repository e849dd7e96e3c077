"""The HTTP ingress and read API (FastAPI), built by ``create_web_app(settings)``.

Every error answers ``{"error": {"code", "message", "field"}}``: never a stack trace. When
``AGENT_SIGNAL_API_TOKEN`` is set, every ``/v1`` call needs ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from producers._client import Producer
from producers._models import EventError, InvalidEvent
from producers._ops import redrive_events
from worker.settings import Settings

__all__ = ["create_web_app"]

log = logging.getLogger(__name__)


def _error(status: int, code: str, message: str, field: str | None = None) -> JSONResponse:
    body: dict[str, Any] = {"code": code, "message": message}
    if field is not None:
        body["field"] = field
    return JSONResponse({"error": body}, status_code=status)


def create_web_app(settings: Settings, *, producer: Producer | None = None) -> FastAPI:
    """The ASGI app. The producer (Redis + broker connections) is opened at startup, not at import."""
    state: dict[str, Producer] = {}

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        state["producer"] = producer or Producer(settings)
        yield
        if producer is None:
            state["producer"].close()

    app = FastAPI(title="Agent Signal", version="0.1.0", lifespan=lifespan)

    def prod() -> Producer:
        return state["producer"]

    @app.middleware("http")
    async def auth(request: Request, call_next: Any) -> Any:
        token = settings.api_token
        if token and request.url.path.startswith("/v1"):
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                return _error(
                    401, "unauthorized", "missing or wrong bearer token (Authorization: Bearer <token>)"
                )
        return await call_next(request)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, f"http_{exc.status_code}", str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first.get("loc", ())[1:]) or None
        return _error(422, "invalid_field", f"{field}: {first.get('msg')}", field)

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return _error(500, "internal", f"internal error ({type(exc).__name__}); see the server log")

    @app.post("/v1/events", status_code=202)
    async def post_events(request: Request) -> JSONResponse:
        raw = await request.body()
        if len(raw) > settings.max_request_bytes:
            return _error(
                413,
                "request_too_large",
                f"request body is {len(raw)} bytes; the limit is {settings.max_request_bytes}",
            )
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            return _error(422, "invalid_json", f"request body is not valid JSON: {exc}")
        try:
            if isinstance(data, dict) and "events" in data and "sourceType" not in data:
                events = data["events"]
                if not isinstance(events, list) or not events:
                    raise InvalidEvent(
                        EventError(
                            code="invalid_field", message="events must be a non-empty array", field="events"
                        )
                    )
                results = prod().enqueue_many(events)
            else:
                results = [prod().enqueue(data)]
        except InvalidEvent as exc:
            prod().store.count_rejected()
            return JSONResponse(
                {"error": exc.error.model_dump(exclude_none=True)}, status_code=exc.status_code
            )
        return JSONResponse({"results": [r.model_dump(by_alias=True) for r in results]}, status_code=202)

    @app.get("/v1/events/{event_id}")
    async def get_event(event_id: str) -> JSONResponse:
        record = prod().status(event_id)
        if record is None:
            return _error(
                404, "not_found", f"no event {event_id!r} (unknown, or older than the dedupe window)"
            )
        return JSONResponse(record)

    @app.get("/v1/chains/{chain_id:path}")
    async def get_chain(chain_id: str) -> JSONResponse:
        chain = prod().store.get_chain(chain_id)
        if chain is None:
            return _error(404, "not_found", f"no chain {chain_id!r} (not run yet, or past retention)")
        return JSONResponse(chain)

    @app.get("/v1/dlq")
    async def get_dlq(offset: int = 0, limit: int = 50) -> JSONResponse:
        limit = max(1, min(limit, 500))
        store = prod().store
        return JSONResponse({"events": store.dlq_list(offset=offset, limit=limit), "total": store.dlq_size()})

    @app.post("/v1/dlq/redrive")
    async def post_redrive(request: Request) -> JSONResponse:
        try:
            body = json.loads(await request.body() or b"{}")
        except ValueError as exc:
            return _error(422, "invalid_json", f"request body is not valid JSON: {exc}")
        ids = body.get("eventIds") if isinstance(body, dict) else None
        redrive_all = isinstance(body, dict) and body.get("all") is True
        if not redrive_all and (not isinstance(ids, list) or not all(isinstance(i, str) for i in ids)):
            return _error(422, "invalid_field", 'give "eventIds": [..] or "all": true', "eventIds")
        return JSONResponse(redrive_events(prod(), None if redrive_all else ids))

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        checks: dict[str, str] = {}
        try:
            prod().store.client.ping()
            checks["redis"] = "ok"
        except Exception as exc:
            checks["redis"] = f"error: {type(exc).__name__}"
        try:
            with prod().app.connection_for_write() as conn:
                conn.ensure_connection(max_retries=1, timeout=2)
            checks["broker"] = "ok"
        except Exception as exc:
            checks["broker"] = f"error: {type(exc).__name__}"
        ready = all(v == "ok" for v in checks.values())
        return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(_prometheus(prod()), media_type="text/plain; version=0.0.4")

    return app


def _prometheus(producer: Producer) -> str:
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
    ]
    return "\n".join(lines) + "\n"
