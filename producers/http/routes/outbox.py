"""Outbox records that failed every attempt: list them, send them again (worker/outbox/dead.py)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from producers.http.access.principal import Principal, require, tenant_keys
from producers.http.api_models import SHARED_ERRORS, body_route, example
from producers.http.web_common import JsonObject, error_response, producer_of
from worker.core.ids import ID_MAX_LENGTH, SCOPE_KEY_MAX_LENGTH, scope_key_problem
from worker.outbox.dead import BadOutboxCursor, dead_page, redrive_dead

__all__ = ["router"]

router = APIRouter(tags=["operations"], responses=SHARED_ERRORS)  # the shared error answers (OpenAPI)

MAX_DEAD_LIMIT = 500
MAX_REDRIVE_RECORDS = 500
MAX_RECORD_ID = 2 * ID_MAX_LENGTH + 64  # "<kind>:<key>"
MAX_DEAD_CURSOR = 16 + 1 + (SCOPE_KEY_MAX_LENGTH + MAX_RECORD_ID + 300) * 4 // 3


class DeadRecord(BaseModel):
    """An outbox record as the run detail shows it (no payload), with where it lives and when it died."""

    model_config = ConfigDict(extra="allow")

    scopeKey: str
    recordId: str = Field(description="``<kind>:<key>``; with ``scopeKey``, what a redrive names.")
    deadAt: int = Field(description="When its last attempt failed (ms).")
    kind: str
    attempts: int
    lastError: str | None = None
    eventId: str | None = None


class DeadRecordsPage(BaseModel):
    records: list[DeadRecord] = Field(description="Latest death first.")
    total: int = Field(description="Dead records in the list (an expired one leaves as a page meets it).")
    cursor: str | None = Field(default=None, description="Set while more follow: the next page's ``cursor``.")


class RecordRef(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scopeKey: str = Field(min_length=1, max_length=SCOPE_KEY_MAX_LENGTH)
    recordId: str = Field(min_length=1, max_length=MAX_RECORD_ID)


class RedriveRecords(BaseModel):
    """Send these dead records again (one not dead, or gone, is answered ``notDead``)."""

    model_config = ConfigDict(extra="forbid")

    records: list[RecordRef] = Field(min_length=1, max_length=MAX_REDRIVE_RECORDS)


class RedriveAllRecords(BaseModel):
    """Send every dead record of the tenant again."""

    model_config = ConfigDict(extra="forbid")

    all: Literal[True]


class RecordsRedriven(BaseModel):
    redriven: list[RecordRef] = Field(description="Pending again, attempts at zero, due now.")
    notDead: list[RecordRef] = Field(description="Not dead (delivered, pending, redriven already) or gone.")


@router.get("/v1/outbox/dead", response_model=DeadRecordsPage)
def get_dead_records(
    request: Request,
    _: Annotated[Principal, Depends(require("read"))],
    limit: Annotated[int, Query(ge=1, le=MAX_DEAD_LIMIT)] = 50,
    cursor: Annotated[
        str | None, Query(max_length=MAX_DEAD_CURSOR, description="The previous page's.")
    ] = None,
) -> JSONResponse:
    """Outbound calls (webhooks, agent runs) that failed every attempt, latest death first; kept for the outbox
    retention (``AGENT_SIGNAL_OUTBOX_RETENTION_S``). ``limit`` 1..500; ``cursor`` continues after a page."""
    try:
        page = dead_page(producer_of(request).store, tenant_keys(request), limit=limit, cursor=cursor)
    except BadOutboxCursor as exc:
        return error_response(422, "invalid_field", str(exc), "cursor")
    return JSONResponse(page.to_json_dict())


@router.post(
    "/v1/outbox/redrive",
    response_model=RecordsRedriven,
    **body_route(
        (RedriveRecords, RedriveAllRecords),
        '``{"records": [{"scopeKey", "recordId"}...]}`` (at most 500) or ``{"all": true}``.',
        examples={
            "records": example(
                "Dead records, as GET /v1/outbox/dead lists them",
                {
                    "records": [
                        {"scopeKey": "agent:agt_1:user:u_1", "recordId": "agent-run:agent-signal-0a1b"}
                    ]
                },
            ),
            "all": example("Every dead record", {"all": True}),
        },
    ),
)
def post_redrive_records(
    request: Request, body: JsonObject, _: Annotated[Principal, Depends(require("operate"))]
) -> JSONResponse:
    """Send dead outbox records again: each pending with its attempts at zero, due now (a journal record after
    its journal's current head); the receiver dedupes on the record's unchanged idempotency key."""
    if isinstance(body, JSONResponse):
        return body
    targets = _targets(body)
    if isinstance(targets, JSONResponse):
        return targets
    return JSONResponse(redrive_dead(producer_of(request).store, tenant_keys(request), targets))


def _targets(body: dict[str, Any]) -> list[tuple[str, str]] | JSONResponse | None:
    """The records named, None for ``"all": true``, or the 422 naming the field."""
    for key in body:
        if key not in ("records", "all"):
            return error_response(422, "unknown_field", f"{key} is not a field of this request", key)
    if body.get("all") is True and "records" not in body:
        return None
    records = body.get("records")
    if "all" in body or not isinstance(records, list) or not 1 <= len(records) <= MAX_REDRIVE_RECORDS:
        message = f'give "records": [1..{MAX_REDRIVE_RECORDS} of {{"scopeKey", "recordId"}}] or "all": true'
        return error_response(422, "invalid_field", message, "records")
    targets = []
    for i, item in enumerate(records):
        for field, bound in (("scopeKey", SCOPE_KEY_MAX_LENGTH), ("recordId", MAX_RECORD_ID)):
            value = item.get(field) if isinstance(item, dict) else None
            where = f"records[{i}].{field}"
            if not isinstance(value, str) or not 0 < len(value) <= bound:
                return error_response(422, "invalid_field", f"{where} must be 1..{bound} characters", where)
            if field == "scopeKey" and (problem := scope_key_problem(value)) is not None:
                return error_response(422, "invalid_field", f"{where}: {problem.message}", where)
        if set(item) - {"scopeKey", "recordId"}:
            extra = sorted(set(item) - {"scopeKey", "recordId"})[0]
            return error_response(
                422, "unknown_field", f"records[{i}].{extra} is not a field", f"records[{i}].{extra}"
            )
        targets.append((item["scopeKey"], item["recordId"]))
    return targets
