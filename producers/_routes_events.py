"""``POST /v1/events`` and ``GET /v1/events/{eventId}``."""

from __future__ import annotations

import json

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from producers._models import EventError, InvalidEvent
from producers._web_common import error_response, producer_of, settings_of

__all__ = ["router"]

router = APIRouter()


@router.post("/v1/events", status_code=202)
async def post_events(request: Request) -> JSONResponse:
    """One SourceEvent, or ``{"events": [...]}``; all or nothing."""
    settings = settings_of(request)
    producer = producer_of(request)
    raw = await request.body()
    if len(raw) > settings.max_request_bytes:
        return error_response(
            413,
            "request_too_large",
            f"request body is {len(raw)} bytes; the limit is {settings.max_request_bytes}",
        )
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        return error_response(422, "invalid_json", f"request body is not valid JSON: {exc}")
    try:
        if isinstance(data, dict) and "events" in data and "sourceType" not in data:
            events = data["events"]
            if not isinstance(events, list) or not events:
                raise InvalidEvent(
                    EventError(
                        code="invalid_field", message="events must be a non-empty array", field="events"
                    )
                )
            results = producer.enqueue_many(events)
        else:
            results = [producer.enqueue(data)]
    except InvalidEvent as exc:
        producer.store.count_rejected()
        return JSONResponse({"error": exc.error.model_dump(exclude_none=True)}, status_code=exc.status_code)
    return JSONResponse({"results": [r.model_dump(by_alias=True) for r in results]}, status_code=202)


@router.get("/v1/events/{event_id}")
def get_event(event_id: str, request: Request) -> JSONResponse:
    record = producer_of(request).status(event_id)
    if record is None:
        return error_response(
            404, "not_found", f"no event {event_id!r} (unknown, or older than the dedupe window)"
        )
    return JSONResponse(record)
