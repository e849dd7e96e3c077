"""``POST /v1/events``, ``GET /v1/events`` (the runs explorer), ``GET /v1/events/{eventId}`` (an event id, or a
source id unambiguous within the tenant) and ``POST /v1/events/{eventId}/cancel``.

The id is a ``path`` parameter: a source id may hold ``/`` (sent raw or percent-encoded as ``%2F``, which the
server decodes before routing), so ``GET /v1/events/a/b`` looks up ``a/b``; ``POST …/a/b/cancel`` still reaches
the cancel route, the only one below an event (a GET never matches it: it is a POST).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from redis.exceptions import RedisError

from policies.conversation import RECORDED_ANSWER_FIELDS
from producers.http.access.principal import Principal, require, tenant_keys
from producers.http.api_models import (
    SHARED_ERRORS,
    AttemptRecord,
    ErrorDetail,
    EventState,
    EventStatus,
    Receipt,
    body_route,
    example,
)
from producers.http.web_common import door_of, error_response, producer_of, read_json
from worker.core.ids import SCOPE_KEY_MAX_LENGTH, Id
from worker.core.scope import confined_scope_key
from worker.intake.source_event import EventError, InvalidEvent, SourceEvent, as_single
from worker.keys.layout import Keys
from worker.ops.rate_limit import RateLimiter
from worker.ops.runs import BadCursor, RunQuery, event_detail, find_by_source, list_runs
from worker.ops.scope_control import cancel_event
from worker.outbox.relay import records_of_event
from worker.store.events import EventStore
from worker.store.receipts import NO_USER, ReceiptStore
from worker.store.replies import CancelCode

__all__ = ["router"]

router = APIRouter(tags=["events"], responses=SHARED_ERRORS)  # the shared error answers (OpenAPI)


class EventBatch(BaseModel):
    """Several SourceEvents, all or nothing (at most ``AGENT_SIGNAL_MAX_BATCH_EVENTS``, else 413)."""

    model_config = ConfigDict(extra="forbid")

    events: list[SourceEvent] = Field(min_length=1)


class IngestResult(BaseModel):
    eventId: str
    sourceId: str
    status: str = Field(
        description="``accepted``, ``duplicate`` (its dedupe key was seen), or an admission check's verdict."
    )


class IngestResults(BaseModel):
    """One result per event, in the request's order."""

    results: list[IngestResult]


class EventPage(BaseModel):
    """Newest first; ``cursor`` (when present) continues the listing (a page may be short and still have one)."""

    events: list[EventStatus]
    cursor: str | None = None


class EventDetail(EventStatus):
    """The status record with its attempts, the stored event and its outbound calls."""

    attemptsHistory: list[AttemptRecord] = Field(description="Oldest first.")
    event: dict[str, Any] | None = Field(
        default=None, description="The stored SourceEvent (absent on an erased user's tombstone)."
    )
    outbox: list[dict[str, Any]] | None = Field(
        default=None, description="Its outbound calls: kind, key, state, attempts, last error."
    )
    hasChain: bool = Field(
        default=False,
        description="Whether its run's chain (the trace) is stored: ``GET /v1/chains/{eventId}`` answers it then, "
        "and 404 when not (an event that has not run yet, or died before any step was recorded).",
    )
    receipts: list[Receipt] = Field(
        default_factory=list,
        description="The receipts its run produced: appended by its chain, or reported by the agent runs it "
        "started (their outbound calls' keys are the runs' operation ids). Newest first; its user's only.",
    )


class Candidate(BaseModel):
    eventId: str
    sourceType: str | None
    scopeKey: str | None
    status: EventState


class Conflict(BaseModel):
    """409: ``ambiguous_source_id`` (a source id of several events: ``candidates`` lists them) or
    ``not_cancellable``."""

    error: ErrorDetail
    candidates: list[Candidate] | None = None


class Cancelled(BaseModel):
    eventId: str
    status: EventState = Field(description="``cancelled``, or ``processing`` until a running event stops.")
    cancelRequested: bool = Field(description="True for a running event: it stops before its next action.")


_CONFLICT: dict[int | str, dict[str, Any]] = {
    409: {"model": Conflict, "description": "A source id of several events, or an event that cannot cancel."}
}


def _message(message_id: str, text: str) -> dict[str, Any]:
    """A user's chat message as LobeHub sends it (the shape of examples/events.jsonl)."""
    return {
        "sourceType": "agent.user.message",
        "sourceId": message_id,
        "userId": "u1",
        "agentId": "agt_1",
        "payload": {"agentId": "agt_1", "topicId": "tpc_1", "messageId": message_id, "message": text},
    }


# Swagger UI's "Try it out" starts from the first (sending it twice answers "duplicate", still 202).
EVENT_EXAMPLES = {
    "one_event": example("One user message", _message("msg_u1", "Going forward, I prefer concise answers.")),
    "batch": example(
        "A batch (all or nothing)",
        {
            "events": [
                _message("msg_u2", "Thanks."),
                {
                    "sourceType": "tool.outcome.completed",
                    "sourceId": "tool-outcome:lobe-user-memory:addPreferenceMemory:succeeded:call_1",
                    "userId": "u1",
                    "agentId": "agt_1",
                    "payload": {
                        "agentId": "agt_1",
                        "topicId": "tpc_1",
                        "tool": {"identifier": "lobe-user-memory", "apiName": "addPreferenceMemory"},
                        "outcome": {"status": "succeeded", "summary": "Saved a preference memory."},
                        "toolCallId": "call_1",
                    },
                },
            ]
        },
    ),
}


async def event_body(request: Request) -> Any:
    """A FastAPI dependency: the decoded body (any JSON value: the SDK's parser names a non-object), or the
    413 over ``max_request_bytes`` / 422 ``invalid_json`` response."""
    return await read_json(request, require_object=False, max_bytes=door_of(request).max_request_bytes)


@router.post(
    "/v1/events",
    status_code=202,
    response_model=IngestResults,
    **body_route(
        (SourceEvent, EventBatch),
        'One SourceEvent, or ``{"events": [SourceEvent, …]}``.',
        examples=EVENT_EXAMPLES,
    ),
)
def post_events(
    request: Request,
    data: Annotated[Any, Depends(event_body)],
    principal: Annotated[Principal, Depends(require("ingest", users=True))],
) -> JSONResponse:
    """One SourceEvent, or ``{"events": [...]}``; all or nothing. The tenant is the credential's; a user
    token's events are stamped with its userId (an event naming another user is refused)."""
    producer, tenant = producer_of(request), principal.tenant
    if isinstance(data, JSONResponse):  # a body that is no JSON, or too large: its events are not known
        producer.count_rejected(tenant=tenant)
        return data
    try:
        batch = isinstance(data, dict) and "events" in data and "sourceType" not in data
        if batch:
            for key in data:
                if key != "events":  # as a single event's unknown field is: never dropped unseen
                    message = f"{key} is not a field of a batch (its one field: events)"
                    raise InvalidEvent(EventError(code="unknown_field", message=message, field=key))
            events = data["events"]
            if not isinstance(events, list) or not events:
                raise InvalidEvent(
                    EventError(
                        code="invalid_field", message="events must be a non-empty array", field="events"
                    )
                )
            _no_recorded_answer(events, batch=True)
            prepared = producer.emitter.validate_many(_stamped(events, principal, batch=True), tenant=tenant)
        else:
            _no_recorded_answer([data], batch=False)
            stamped = _stamped([data], principal, batch=False)
            prepared = producer.emitter.validate_many(stamped, tenant=tenant, single=True)
        # Valid input only takes from the tenant's quota (a rejected request stores nothing at all).
        if (refused := _over_tenant_rate(request, principal.tenant, len(prepared))) is not None:
            return refused
        results = producer.enqueue_prepared(prepared)
    except InvalidEvent as exc:
        # all or nothing: every event of a refused batch is rejected (the CLI's door counts them so too)
        events_sent = data.get("events") if batch and isinstance(data, dict) else None
        producer.count_rejected(
            len(events_sent) if isinstance(events_sent, list) and events_sent else 1, tenant=tenant
        )
        error = (exc if batch else as_single(exc)).error
        return error_response(exc.status_code, error.code, error.message, error.field)
    return JSONResponse({"results": [r.model_dump(by_alias=True) for r in results]}, status_code=202)


def _no_recorded_answer(events: list[Any], *, batch: bool) -> None:
    """A ``chat.request`` carrying a routing answer (``routeResult``, ``configFingerprint``) is refused: only
    ``POST /v1/route`` records one, with the decision its router made; one sent here would put a decision, a
    rule and a config fingerprint no router produced in the event's chain (an audit)."""
    for index, event in enumerate(events):
        if not isinstance(event, dict) or "chat.request" not in (
            event.get("sourceType"),
            event.get("source_type"),
        ):
            continue  # (the event model reads either spelling)
        payload = event.get("payload")
        if not isinstance(payload, dict):
            continue  # the parser names what is wrong with it
        for name in RECORDED_ANSWER_FIELDS:
            if name in payload:
                where = f"events[{index}].payload.{name}" if batch else f"payload.{name}"
                message = (
                    f"{where} is recorded by POST /v1/route with the decision its router made; send the request "
                    "there, or send this event without it for the worker's router to route it"
                )
                raise InvalidEvent(EventError(code="invalid_field", message=message, field=where))


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
        event = _camel_names(event)
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


# a SourceEvent's fields under their Python names, which the door takes too: user_id -> userId, scope_key -> …
PYTHON_NAMES = {name: to_camel(name) for name in SourceEvent.model_fields if "_" in name}


def _camel_names(event: dict[str, Any]) -> dict[str, Any]:
    """``event`` with each field given under its Python name (``user_id``, ``scope_key``) under its JSON name,
    so that a user token's checks and stamps read the field the event gives: ``user_id`` naming another user
    was a 422 ``unknown_field`` once the stamp added ``userId`` beside it, not the ``forbidden_user`` it is. A
    field given under both names is left for the parser to refuse."""
    given = {name for name in event if name in PYTHON_NAMES and PYTHON_NAMES[name] not in event}
    if not given:
        return event
    return {(PYTHON_NAMES[name] if name in given else name): value for name, value in event.items()}


def _own_scope(event: dict[str, Any], user_id: str) -> dict[str, Any]:
    """A user token's event runs in its user's own scope: one it names or derives (``topic:…``) that is not the
    user's (``user:<id>``, ``agent:<a>:user:<id>``, ``user:<id>/…``) is put under ``user:<id>/``
    (:func:`~worker.core.scope.own_scope_key`, the rule its chain's follow-ups keep to as well). So another
    user's scope, inbox and dedupe identities are out of reach (no squatting their next sourceId, no filling
    their inbox)."""
    given = event.get("scopeKey")
    payload = event.get("payload")
    if given is not None and not isinstance(given, str):
        return event  # the parser names what is wrong with it
    scope = confined_scope_key(
        given,
        payload if isinstance(payload, dict) else {},
        own_user=user_id,
        user_id=user_id,
        agent_id=_text(event.get("agentId")),
    )
    return {**event, "scopeKey": scope}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _over_tenant_rate(request: Request, tenant: str, n: int) -> JSONResponse | None:
    """The tenant's events/s quota (``AGENT_SIGNAL_TENANT_EVENTS_PER_S``): a 429 for the whole request, or None."""
    settings = door_of(request)
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


@router.get("/v1/events", response_model=EventPage)
def list_events(
    request: Request,
    _: Annotated[Principal, Depends(require("read"))],
    status: EventState | None = None,
    source_type: Annotated[str | None, Query(alias="sourceType", max_length=200)] = None,
    scope_key: Annotated[str | None, Query(alias="scopeKey", max_length=SCOPE_KEY_MAX_LENGTH)] = None,
    user_id: Annotated[str | None, Query(alias="userId", max_length=256)] = None,
    since: Annotated[int | None, Query(ge=0)] = None,
    until: Annotated[int | None, Query(ge=0)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[str | None, Query(max_length=2048)] = None,
) -> JSONResponse:
    """Events newest first (enqueue time, then id), filters combined; ``cursor`` continues a listing. Each is
    the status record of ``GET /v1/events/{eventId}`` with sourceType, sourceId, scopeKey, userId, enqueuedAt,
    finishedAt. A page may hold fewer than ``limit`` events and still carry a cursor (worker/ops/runs.py)."""
    query = RunQuery(status, source_type, scope_key, user_id, since, until, limit, cursor or None)
    try:
        page = list_runs(producer_of(request).store, tenant_keys(request), query)
    except BadCursor as exc:
        return error_response(422, "invalid_cursor", str(exc), "cursor")
    body: dict[str, Any] = {"events": page.events}
    if page.cursor is not None:
        body["cursor"] = page.cursor
    return JSONResponse(body)


def resolve_event(store: EventStore, keys: Keys, event_id: str) -> str | JSONResponse:
    """The event id for ``event_id`` (an event id, or a source id that names one event of the tenant), or the
    404 (unknown) / 409 (a source id of several events: the candidates are listed) to answer."""
    if store.client.exists(store.locate(keys, event_id).event(event_id)):
        return event_id
    candidates = find_by_source(store, keys, event_id)
    if len(candidates) == 1:
        return str(candidates[0]["eventId"])
    if not candidates:
        return error_response(
            404, "not_found", f"no event {event_id!r} (unknown, or older than the dedupe window)", "eventId"
        )
    names = ", ".join(f"{c['eventId']} ({c.get('sourceType')} in {c.get('scopeKey')})" for c in candidates)
    message = f"source id {event_id!r} names several events: {names}"
    listed = [{k: c.get(k) for k in ("eventId", "sourceType", "scopeKey", "status")} for c in candidates]
    # error_response's body, plus the candidates (so a client picks one without parsing the message)
    return JSONResponse(
        {
            "error": {"code": "ambiguous_source_id", "message": message, "field": "eventId"},
            "candidates": listed,
        },
        status_code=409,
    )


@router.get("/v1/events/{event_id:path}", response_model=EventDetail, responses=_CONFLICT)
def get_event(
    event_id: Id, request: Request, principal: Annotated[Principal, Depends(require("read"))]
) -> JSONResponse:
    """The event's status record with its ``attemptsHistory`` and the stored ``event`` (its payload); a source
    id works when it names one event."""
    store, keys = producer_of(request).store, tenant_keys(request)
    found = resolve_event(store, keys, event_id)
    if isinstance(found, JSONResponse):
        return found
    record = event_detail(store, keys, found)
    if record is None:
        return error_response(404, "not_found", f"no event {event_id!r}", "eventId")
    outbox = records_of_event(keys, store, str(record.get("scopeKey") or ""), found)
    if outbox:
        record["outbox"] = outbox  # its outbound calls: state, attempts, last error
    # the UI asks for the chain only when there is one (a chainless dead run made a 404 on every look)
    record["hasChain"] = bool(store.client.exists(store.locate(keys, found).chain(found)))
    runs = [found, *(str(call["key"]) for call in outbox if call.get("key"))]
    receipts = ReceiptStore(store.client, keys, ttl_s=0)
    record["receipts"] = receipts.produced_by(str(record.get("userId") or NO_USER), runs)
    return JSONResponse(record)


@router.post("/v1/events/{event_id:path}/cancel", response_model=Cancelled, responses=_CONFLICT)
def post_cancel(
    event_id: Id, request: Request, principal: Annotated[Principal, Depends(require("operate"))]
) -> JSONResponse:
    """A queued event is cancelled now and never runs; a running one stops before its next action and is
    committed ``cancelled`` with none of its chain's staged writes (``status`` stays processing until then); one
    already in its last action has no next action to stop before, and ends ``done``."""
    store, keys = producer_of(request).store, tenant_keys(request)
    found = resolve_event(store, keys, event_id)
    if isinstance(found, JSONResponse):
        return found
    result = cancel_event(store, keys, found, actor=principal.actor)
    if result.now:  # a queued event: no worker commits it, so no worker counts it
        producer_of(request).telemetry.cancelled_queued(tenant=keys.tenant)
    if result.code is CancelCode.UNKNOWN:
        return error_response(404, "not_found", f"no event {event_id!r}", "eventId")
    if result.code is CancelCode.FINAL:
        return error_response(
            409, "not_cancellable", f"event {found} is {result.state}: only queued or running events cancel"
        )
    return JSONResponse(
        {"eventId": found, "status": result.state, "cancelRequested": result.code is CancelCode.REQUESTED}
    )
