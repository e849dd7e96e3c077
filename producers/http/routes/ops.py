"""Operations: chains, the dead-letter list, health, readiness and metrics."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from producers.http.access.ops import ops_access, ops_detail
from producers.http.access.principal import Principal, principal_of, public, require, tenant_keys
from producers.http.api_models import SHARED_ERRORS, ErrorBody, ErrorDetail, EventStatus, body_route, example
from producers.http.web_common import JsonObject, door_of, error_response, producer_of
from producers.sdk.dead_letters import dead_event_ids, discard_events, edited_bodies, redrive_events
from worker.core.ids import Id
from worker.ops.runs import BadDlqCursor, dlq_page
from worker.ops.state_metrics import runnable_backlog, state_exposition
from worker.store.reads import EVENT_ID
from worker.store.server.safety import current_safety
from worker.telemetry.process_metrics import CONTENT_TYPE, exposition

__all__ = ["router"]

router = APIRouter(tags=["operations"], responses=SHARED_ERRORS)  # the shared error answers (OpenAPI)

MAX_DLQ_OFFSET = 1_000_000
MAX_DLQ_LIMIT = 500
MAX_DLQ_CURSOR = 400  # "<ms>:<eventId>"


class ChainDocument(BaseModel):
    """LobeHub's ``{"envelope": TraceEnvelope, "record": TelemetryRecord}`` (our extras in
    ``envelope.metadata``: eventId, attempt, status, terminal)."""

    model_config = ConfigDict(extra="allow")

    envelope: dict[str, Any]
    record: dict[str, Any]


class DlqEvent(EventStatus):
    """A dead event (with ``deadAt``), or with ``state=discarded`` a discarded one (with ``reason`` and ``at``);
    ``event`` is the stored SourceEvent while it is kept."""

    event: dict[str, Any] | None = None
    reason: str | None = Field(default=None, description="Why it was discarded (``state=discarded``).")
    at: int | None = Field(default=None, description="When it was discarded (``state=discarded``).")


class Backlog(BaseModel):
    eventsWaiting: int = Field(description="Events accepted and not yet done or dead, all tenants.")
    byTenant: dict[str, int] = Field(description="The same, per tenant.")
    eventsPaused: int = Field(
        description="Of them, those queued in paused scopes (their inboxes' length, at most each tenant's "
        "eventsWaiting): none of them runs until resumed, but for a head that was running when its scope paused."
    )
    eventsRunnable: int = Field(
        description="eventsWaiting less eventsPaused: what more workers can work on (KEDA's figure). Events "
        "waiting for a retry's countdown are in it."
    )


class DlqPage(BaseModel):
    events: list[DlqEvent] = Field(description="Latest death (or discard) first.")
    total: int = Field(description="Events in the list (dead, or discarded).")
    cursor: str | None = Field(
        default=None,
        description="Set when more follow this page: the next page's ``cursor``, which, unlike ``offset``, "
        "neither repeats nor skips an event when others die or leave meanwhile.",
    )


class RedriveIds(BaseModel):
    """Redrive these dead events (ids that are not dead are answered ``notDead``)."""

    model_config = ConfigDict(extra="forbid")

    eventIds: list[str]


class RedriveAll(BaseModel):
    """Redrive every dead event of the tenant (at most ``AGENT_SIGNAL_DLQ_BATCH_MAX`` per request: send it again,
    with the answer's ``until``, while it says ``"more": true``)."""

    model_config = ConfigDict(extra="forbid")

    all: Literal[True]
    until: int | None = Field(
        default=None,
        ge=0,
        description='The ``until`` a previous answer gave with ``"more": true``: only events dead by then (Unix '
        "ms), so an event that dies again meanwhile is not taken twice by one sweep.",
    )


class EditedEvent(BaseModel):
    model_config = ConfigDict(extra="forbid")

    eventId: str = Field(min_length=1)
    payload: dict[str, Any] = Field(description="The new payload, validated like a new event's.")


class RedriveEdited(BaseModel):
    """Redrive dead events with edited payloads: all or nothing (a 422 names ``events[i].payload.<field>``)."""

    model_config = ConfigDict(extra="forbid")

    events: list[EditedEvent] = Field(min_length=1)


MORE = (
    'Present, and true, only when ``{"all": true}`` stopped at ``AGENT_SIGNAL_DLQ_BATCH_MAX`` dead events while '
    "others remain: send the request again with ``until``."
)
UNTIL = (
    'With ``"more": true``: the time (Unix ms) this sweep of the DLQ started; send it back as ``until`` so the '
    "sweep ends (an event that dies again meanwhile is left for the next one)."
)


class Redriven(BaseModel):
    redriven: list[str] = Field(description="Requeued, each at its scope's tail.")
    notDead: list[str] = Field(description="Unknown, or not dead: nothing done.")
    more: bool | None = Field(default=None, description=MORE)
    until: int | None = Field(default=None, description=UNTIL)


class DiscardIds(BaseModel):
    """Discard these dead events (ids that are not dead are answered ``notDead``)."""

    model_config = ConfigDict(extra="forbid")

    eventIds: list[str]
    reason: str = Field(default="", max_length=1000)


class DiscardAll(BaseModel):
    """Discard every dead event of the tenant (at most ``AGENT_SIGNAL_DLQ_BATCH_MAX`` per request: send it again,
    with the answer's ``until``, while it says ``"more": true``)."""

    model_config = ConfigDict(extra="forbid")

    all: Literal[True]
    reason: str = Field(default="", max_length=1000)
    until: int | None = Field(
        default=None,
        ge=0,
        description='The ``until`` a previous answer gave with ``"more": true``: only events dead by then (Unix '
        "ms), so an event that dies again meanwhile is not taken twice by one sweep.",
    )


class Discarded(BaseModel):
    discarded: list[str] = Field(description="Out of the DLQ, kept as audit records.")
    notDead: list[str] = Field(description="Unknown, or not dead: nothing done.")
    more: bool | None = Field(default=None, description=MORE)
    until: int | None = Field(default=None, description=UNTIL)


class Health(BaseModel):
    status: Literal["ok"]


class Readiness(BaseModel):
    """``checks``: ``redis`` and ``broker`` (``ok`` or ``error: <kind>``), and store checks when there is
    something to say (``eviction``, ``persistence``, ``memory``: ``error…`` fails readiness, others warn).
    Only a caller that may read the operations surfaces gets ``checks``; anyone gets ``ready`` and the status."""

    ready: bool
    checks: dict[str, str] | None = Field(
        default=None, description="Only for a metrics or read key of the default tenant (or ops_open=always)."
    )


class ChainRun(BaseModel):
    eventId: str
    userId: str | None = None
    scopeKey: str | None = None
    sourceType: str | None = None
    status: str | None = None


class ChainConflict(BaseModel):
    """409 ``ambiguous_chain_id``: LobeHub's chain id names the runs of several events (one source id sent by
    two users, or in two scopes); ``candidates`` lists them: ask again with an ``eventId`` (or ``userId``)."""

    error: ErrorDetail
    candidates: list[ChainRun]


@router.get(
    "/v1/chains/{chain_id:path}",
    response_model=ChainDocument,
    responses={409: {"model": ChainConflict, "description": "A chain id of several runs."}},
)
def get_chain(
    chain_id: Id,
    request: Request,
    _: Annotated[Principal, Depends(require("read"))],
    user_id: Annotated[str | None, Query(alias="userId", max_length=256)] = None,
) -> JSONResponse:
    """The trace of one run. ``chain_id`` is an event id (that event's run) or LobeHub's chain id
    ``chain:<sourceId>``, which names the run of every event with that source id: ``userId`` keeps one user's;
    when several runs with a trace remain, the answer is 409 ``ambiguous_chain_id`` listing them."""
    store, keys = producer_of(request).store, tenant_keys(request)
    if not EVENT_ID.fullmatch(chain_id):
        runs = store.chain_runs(keys, chain_id, user_id=user_id)
        traced = [
            r
            for r in runs
            if store.client.exists(store.locate(keys, str(r["eventId"])).chain(str(r["eventId"])))
        ]
        if len(traced) > 1:
            listed = [{k: r.get(k) for k in ChainRun.model_fields} for r in traced]
            names = ", ".join(f"{r['eventId']} (user {r.get('userId') or '-'})" for r in traced[:10])
            narrow = "" if user_id else ", or narrow by userId (the CLI's --user)"  # given: it did not narrow
            message = (
                f"chain id {chain_id!r} names {len(traced)} runs: {names}; ask for one by its eventId{narrow}"
            )
            return JSONResponse(
                {
                    "error": {"code": "ambiguous_chain_id", "message": message, "field": "chainId"},
                    "candidates": listed,
                },
                status_code=409,
            )
        if len(traced) == 1:
            chain_id = str(traced[0]["eventId"])
    chain = store.get_chain(keys, chain_id, user_id=user_id)
    if chain is None:
        # a source id alone is no chain id: LobeHub's is chain:<sourceId> (the CLI's inspect adds the prefix)
        hint = (
            ""
            if EVENT_ID.fullmatch(chain_id) or chain_id.startswith("chain:")
            else f"; did you mean chain:{chain_id}?"
        )
        return error_response(
            404,
            "not_found",
            f"no chain {chain_id!r}{f' of user {user_id!r}' if user_id else ''} (not run yet, past retention, or "
            f"its run failed: a failed run keeps no chain, and GET /v1/events/{{eventId}} has its error){hint}",
            "chainId",
        )
    return JSONResponse(chain)


@router.get("/v1/dlq", response_model=DlqPage)
def get_dlq(
    request: Request,
    _: Annotated[Principal, Depends(require("read"))],
    offset: Annotated[int, Query(ge=0, le=MAX_DLQ_OFFSET)] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_DLQ_LIMIT)] = 50,
    state: Literal["dead", "discarded"] = "dead",
    cursor: Annotated[
        str | None, Query(max_length=MAX_DLQ_CURSOR, description="The previous page's.")
    ] = None,
) -> JSONResponse:
    """Dead events (latest death first), or with ``state=discarded`` the discarded ones (latest discard first,
    each with its ``reason`` and ``at``); ``offset`` 0..1,000,000 and ``limit`` 1..500 (else 422 naming it).
    ``cursor`` (the previous page's, set while more follow) continues after that page, whatever died or left
    meanwhile; it does not go with ``offset``."""
    if cursor is not None and offset:
        return error_response(422, "invalid_field", "give cursor or offset, not both", "cursor")
    try:
        page = dlq_page(
            producer_of(request).store,
            tenant_keys(request),
            state=state,
            offset=offset,
            limit=limit,
            cursor=cursor,
        )
    except BadDlqCursor as exc:
        return error_response(422, "invalid_field", str(exc), "cursor")
    return JSONResponse(page.to_json_dict())


def _one_target(body: dict[str, Any], fields: tuple[str, ...]) -> JSONResponse | None:
    """The 422 for a key outside ``fields`` (naming it: a misspelt ``reason`` is not dropped) or for two targets
    at once (``eventIds`` with ``all`` acted on every dead event), else None."""
    for key in body:
        if key not in fields:
            message = f"{key} is not a field of this request (its fields: {', '.join(fields)})"
            return error_response(422, "unknown_field", message, key)
    given = [
        key for key in ("eventIds", "events", "all") if key in body and body[key] is not False
    ]  # not until
    if len(given) > 1:
        message = f"give one of {', '.join(given)}, not several"
        return error_response(422, "invalid_field", message, given[1])
    return None


def _until(body: dict[str, Any]) -> int | JSONResponse | None:
    """``until`` (with ``"all": true`` only: a whole number of ms), None when absent, or the 422 naming it."""
    if body.get("until") is None:  # absent, or null as the schema allows: the sweep's first request
        return None
    until = body["until"]
    if body.get("all") is not True:
        return error_response(422, "invalid_field", 'until goes with "all": true only', "until")
    if isinstance(until, bool) or not isinstance(until, int) or until < 0:
        return error_response(
            422, "invalid_field", "until must be a whole number of ms (an answer's until)", "until"
        )
    return until


def _ids_or_all(body: dict[str, Any], batch_max: int) -> list[str] | JSONResponse | None:
    """``eventIds`` (strings, at most ``batch_max``), None for ``"all": true``, or the 422 (413 when too many)
    naming ``eventIds``."""
    ids = body.get("eventIds")
    if body.get("all") is True:
        return None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        return error_response(422, "invalid_field", 'give "eventIds": [..] or "all": true', "eventIds")
    return _too_many(ids, "eventIds", batch_max) or ids


def _too_many(items: list[Any], field: str, batch_max: int) -> JSONResponse | None:
    """The 413 ``batch_too_large`` (as for a batch of events) for a list longer than one request may act on
    (AGENT_SIGNAL_DLQ_BATCH_MAX), else None."""
    if len(items) <= batch_max:
        return None
    message = (
        f"{field} holds {len(items)} items; one request acts on at most {batch_max} "
        '(send several, or "all": true, which answers "more" until none remain)'
    )
    return error_response(413, "batch_too_large", message, field)


@router.post(
    "/v1/dlq/redrive",
    response_model=Redriven,
    **body_route(
        (RedriveIds, RedriveAll, RedriveEdited),
        '``{"eventIds": [...]}``, ``{"all": true}``, or ``{"events": [{"eventId", "payload"}...]}``.',
        examples={
            "ids": example(
                "Dead events by id (an id that is not dead is listed in notDead)",
                {"eventIds": ["evt_0123456789abcdef01234567"]},
            ),
            "all": example("Every dead event", {"all": True}),
        },
    ),
)
def post_redrive(
    request: Request, body: JsonObject, _: Annotated[Principal, Depends(require("operate"))]
) -> JSONResponse:
    """``{"eventIds": [...]}``, ``{"all": true}``, or ``{"events": [{"eventId", "payload"}...]}`` to redrive
    with edited payloads (each validated like a new event's: a 422 names ``events[i].payload.<field>`` and
    nothing is redriven)."""
    if isinstance(body, JSONResponse):
        return body
    if (refused := _one_target(body, ("eventIds", "events", "all", "until"))) is not None:
        return refused
    if isinstance(until := _until(body), JSONResponse):
        return until
    producer, principal = producer_of(request), principal_of(request)
    tenant, actor = principal.tenant, principal.actor
    batch_max = door_of(request).dlq_batch_max
    if "events" in body:
        edits = _edits(body["events"])
        if isinstance(edits, JSONResponse):
            return edits
        if (refused := _too_many(edits, "events", batch_max)) is not None:
            return refused
        # an InvalidEvent (a payload the event's rules refuse, an id no event can have) is the app's 422 or 409
        named = dead_event_ids(producer, [e for e, _ in edits], tenant=tenant, field="events[{}].eventId")
        edits = list(zip(named, [payload for _, payload in edits], strict=True))
        bodies = edited_bodies(producer, edits, tenant=tenant)
        edited = [event_id for event_id, _ in edits]
        return JSONResponse(redrive_events(producer, edited, bodies=bodies, tenant=tenant, actor=actor))
    ids = _ids_or_all(body, batch_max)
    if isinstance(ids, JSONResponse):
        return ids
    answer = redrive_events(producer, ids, tenant=tenant, limit=batch_max, until_ms=until, actor=actor)
    return JSONResponse(answer)


def _edits(events: Any) -> list[tuple[str, Any]] | JSONResponse:
    if not isinstance(events, list) or not events:
        return error_response(422, "invalid_field", "events must be a non-empty array", "events")
    edits: list[tuple[str, Any]] = []
    for index, item in enumerate(events):
        if not isinstance(item, dict) or not isinstance(item.get("eventId"), str) or not item["eventId"]:
            field = f"events[{index}].eventId"
            return error_response(422, "invalid_field", f"{field} must be an event id", field)
        if "payload" not in item:
            field = f"events[{index}].payload"
            return error_response(422, "missing_field", f"{field} is required", field)
        edits.append((item["eventId"], item["payload"]))
    return edits


@router.post(
    "/v1/dlq/discard",
    response_model=Discarded,
    **body_route(
        (DiscardIds, DiscardAll),
        '``{"eventIds": [...], "reason"?}`` or ``{"all": true, "reason"?}``.',
        examples={
            "ids": example(
                "Dead events by id, with a reason",
                {"eventIds": ["evt_0123456789abcdef01234567"], "reason": "bad data from a test client"},
            )
        },
    ),
)
def post_discard(
    request: Request, body: JsonObject, _: Annotated[Principal, Depends(require("operate"))]
) -> JSONResponse:
    """``{"eventIds": [...], "reason"?}`` or ``{"all": true, "reason"?}``: dead events leave the DLQ and stay
    as audit records (status ``discarded``, reason, time; ``GET /v1/dlq?state=discarded``)."""
    if isinstance(body, JSONResponse):
        return body
    if (refused := _one_target(body, ("eventIds", "all", "reason", "until"))) is not None:
        return refused
    if isinstance(until := _until(body), JSONResponse):
        return until
    reason = body.get("reason", "")
    if not isinstance(reason, str) or len(reason) > 1000:
        return error_response(
            422, "invalid_field", "reason must be a string of at most 1000 characters", "reason"
        )
    batch_max = door_of(request).dlq_batch_max
    ids = _ids_or_all(body, batch_max)
    if isinstance(ids, JSONResponse):
        return ids
    principal, producer = principal_of(request), producer_of(request)
    answer = discard_events(
        producer,
        ids,
        reason,
        tenant=principal.tenant,
        limit=batch_max,
        until_ms=until,
        actor=principal.actor,
    )
    return JSONResponse(answer)


@router.get("/healthz", dependencies=[Depends(public)], response_model=Health)
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    response_model=Readiness,
    responses={
        503: {
            "model": Readiness | ErrorBody,
            "description": "Not ready (a check failed: ``ready`` false), or the door's store error.",
        }
    },
)
def readyz(request: Request, detail: Annotated[bool, Depends(ops_detail)]) -> JSONResponse:
    """Ready when Redis answers PING, the broker accepts a connection and no store check is an ``error``
    (an evicting policy nobody accepted). ``persistence`` and ``memory`` entries are warnings (still 200).
    Kubernetes probes carry no credential: they get ``{"ready"}`` and the status code; the ``checks`` (which
    name the store's state) go only to a caller that may read the operations surfaces."""
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
    answer = {"ready": ready, "checks": checks} if detail else {"ready": ready}
    return JSONResponse(answer, status_code=200 if ready else 503)


@router.get("/metrics", dependencies=[Depends(ops_access)], response_class=PlainTextResponse)
def metrics(request: Request) -> Response:
    """This process's metrics (Prometheus text): what *this* web process did. Scrape every replica and sum;
    workers serve their own on ``AGENT_SIGNAL_WORKER_METRICS_PORT``; engine-wide state is ``/metrics/state``."""
    telemetry = getattr(request.app.state, "telemetry", None)
    if telemetry is not None:
        telemetry.flush_measurements()  # this process's buffered measurements first
    return Response(exposition(), media_type=CONTENT_TYPE)


@router.get("/metrics/state", dependencies=[Depends(ops_access)], response_class=PlainTextResponse)
def metrics_state(request: Request) -> Response:
    """Engine-wide state gauges read from Redis now (backlog, stuck scopes, DLQ, active scopes, store safety).
    Every replica answers the same figures: scrape it once (through the Service), not per pod."""
    producer = producer_of(request)
    return Response(state_exposition(producer.store, producer.settings.queue_name), media_type=CONTENT_TYPE)


@router.get("/v1/backlog", dependencies=[Depends(ops_access)], response_model=Backlog)
def get_backlog(request: Request) -> dict[str, Any]:
    """Events accepted and not yet done or dead, in all and per tenant, and of them those that workers can run
    (not queued in a paused scope): what the worker autoscaler (KEDA's metrics-api trigger, ``valueLocation:
    eventsRunnable``) scales on."""
    by_tenant, paused_by_tenant = runnable_backlog(producer_of(request).store)
    waiting, paused = sum(by_tenant.values()), sum(paused_by_tenant.values())
    return {
        "eventsWaiting": waiting,
        "byTenant": by_tenant,
        "eventsPaused": paused,
        "eventsRunnable": waiting - paused,
    }
