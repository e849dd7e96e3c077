"""``POST /v1/events`` and ``GET /v1/events/{eventId}``."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from redis.exceptions import RedisError

from producers._principal import Principal, require
from producers._web_common import error_response, producer_of, read_json, settings_of
from worker.intake import EventError, InvalidEvent
from worker.outbox import records_of_event
from worker.rate_limit import RateLimiter
from worker.scope import derive_scope_key

__all__ = ["router"]

router = APIRouter()


async def event_body(request: Request) -> Any:
    """A FastAPI dependency: the decoded body (any JSON value: the SDK's parser names a non-object), or the
    413 over ``max_request_bytes`` / 422 ``invalid_json`` response."""
    return await read_json(request, require_object=False, max_bytes=settings_of(request).max_request_bytes)


@router.post("/v1/events", status_code=202)
def post_events(
    request: Request,
    data: Annotated[Any, Depends(event_body)],
    principal: Annotated[Principal, Depends(require("ingest", users=True))],
) -> JSONResponse:
    """One SourceEvent, or ``{"events": [...]}``; all or nothing. The tenant is the credential's; a user
    token's events are stamped with its userId (an event naming another user is refused)."""
    if isinstance(data, JSONResponse):
        return data
    producer = producer_of(request).for_tenant(principal.tenant)
    try:
        if isinstance(data, dict) and "events" in data and "sourceType" not in data:
            events = data["events"]
            if not isinstance(events, list) or not events:
                raise InvalidEvent(
                    EventError(
                        code="invalid_field", message="events must be a non-empty array", field="events"
                    )
                )
            prepared = producer.emitter.validate_many(_stamped(events, principal, batch=True))
        else:
            prepared = producer.emitter.validate_many(_stamped([data], principal, batch=False), single=True)
        # Valid input only takes from the tenant's quota (a rejected request stores nothing at all).
        if (refused := _over_tenant_rate(request, principal.tenant, len(prepared))) is not None:
            return refused
        results = producer.enqueue_prepared(prepared)
    except InvalidEvent as exc:
        producer.store.count_rejected()
        error = exc.error
        return error_response(exc.status_code, error.code, error.message, error.field)
    return JSONResponse({"results": [r.model_dump(by_alias=True) for r in results]}, status_code=202)


def _stamped(events: list[Any], principal: Principal, *, batch: bool) -> list[Any]:
    """A user token's events carry its userId (top level and payload); another userId is a 422 naming it."""
    if principal.user_id is None:
        return events
    out: list[Any] = []
    for index, event in enumerate(events):
        if not isinstance(event, dict):
            out.append(event)  # the parser names what is wrong with it
            continue
        where = f"events[{index}]." if batch else ""
        payload = event.get("payload")
        for field, given in (("userId", event.get("userId")), ("payload.userId", _get(payload, "userId"))):
            if given is not None and given != principal.user_id:
                raise InvalidEvent(
                    EventError(
                        code="forbidden_user",
                        message=f"{where}{field} must be this token's user or absent",
                        field=f"{where}{field}",
                    )
                )
        stamped = {**event, "userId": principal.user_id}
        if isinstance(payload, dict):
            stamped["payload"] = {**payload, "userId": principal.user_id}
        out.append(_own_scope(stamped, principal.user_id))
    return out


def _own_scope(event: dict[str, Any], user_id: str) -> dict[str, Any]:
    """A user token's event runs in its user's own scope: one it names or derives (``topic:…``) that is not the
    user's (``user:<id>``, ``agent:<a>:user:<id>``) is put under ``user:<id>/``. So another user's scope, inbox
    and dedupe identities are out of reach (no squatting their next sourceId, no filling their inbox)."""
    given = event.get("scopeKey")
    payload = event.get("payload")
    if given is not None and not isinstance(given, str):
        return event  # the parser names what is wrong with it
    scope = given or derive_scope_key(
        payload if isinstance(payload, dict) else {}, user_id=user_id, agent_id=_text(event.get("agentId"))
    )
    if scope == f"user:{user_id}" or (scope.startswith("agent:") and scope.endswith(f":user:{user_id}")):
        return {**event, "scopeKey": scope}
    return {**event, "scopeKey": f"user:{user_id}/{scope}"}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _over_tenant_rate(request: Request, tenant: str, n: int) -> JSONResponse | None:
    """The tenant's events/s quota (``AGENT_SIGNAL_TENANT_EVENTS_PER_S``): a 429 for the whole request, or None."""
    settings = settings_of(request)
    if settings.tenant_events_per_s <= 0:
        return None
    limiter: RateLimiter | None = getattr(request.app.state, "tenant_limiter", None)
    producer = producer_of(request)
    if limiter is None:
        limiter = request.app.state.tenant_limiter = RateLimiter(
            producer.store.keys, settings.tenant_events_per_s
        )
    try:
        decision = limiter.take(producer.store.client, f"tenant:{tenant}", n)
    except RedisError:
        return None  # a full or unreachable store: the enqueue itself answers why (503, nothing stored)
    if decision.allowed:
        return None
    response = error_response(
        429, "tenant_rate_limited", f"tenant {tenant!r} is over {settings.tenant_events_per_s:g} events/s"
    )
    response.headers["Retry-After"] = str(decision.retry_after_s)
    return response


def _get(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, dict) else None


@router.get("/v1/events/{event_id}")
def get_event(
    event_id: str, request: Request, principal: Annotated[Principal, Depends(require("read"))]
) -> JSONResponse:
    producer = producer_of(request).for_tenant(principal.tenant)
    record = producer.status(event_id)
    if record is None:
        return error_response(
            404, "not_found", f"no event {event_id!r} (unknown, or older than the dedupe window)"
        )
    outbox = records_of_event(producer.store, str(record.get("scopeKey") or ""), event_id)
    if outbox:
        record["outbox"] = outbox  # its outbound calls: state, attempts, last error
    return JSONResponse(record)
