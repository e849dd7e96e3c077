"""Operations shared by the CLI and the HTTP API: redriving dead events (as they were, or with an edited
payload), discarding them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from policies.conversation import RECORDED_ANSWER_FIELDS
from producers.sdk.producer import Producer
from worker.core.ids import id_problem
from worker.documents.event_body import body_of, stored_body
from worker.intake.source_event import EventError, InvalidEvent
from worker.keys.layout import Keys
from worker.ops.audit import CLI_ACTOR, audit_each
from worker.ops.runs import discard
from worker.store.reads import EVENT_ID

__all__ = ["dead_event_ids", "discard_events", "edited_bodies", "redrive_events"]

# The SourceEvent fields a stored event (the worker's Source) carries over to an edited one.
_EVENT_FIELDS = ("sourceType", "sourceId", "scopeKey", "timestamp", "userId", "agentId", "workspaceId")


def redrive_events(
    producer: Producer,
    event_ids: Sequence[str] | None,
    *,
    bodies: Mapping[str, str] | None = None,
    tenant: str | None = None,
    limit: int | None = None,
    until_ms: int | None = None,
    actor: str = CLI_ACTOR,
) -> dict[str, Any]:
    """Requeue the given dead events (all of them when ``event_ids`` is None, or the ``limit`` longest dead,
    the answer then saying ``"more": true`` when others remain; an id given twice counts once), each at its
    scope's tail.

    The event keeps its id and dedupe record; its attempts restart at 0; actions it already applied stay
    applied (their idempotency lanes are untouched), so a redrive can only finish what failed. ``bodies``
    (from :func:`edited_bodies`) replace the stored events of those ids. ``tenant``: the producer's by default.
    Each event redriven is audited with ``actor`` (worker/ops/audit.py), and whether its payload was edited.
    """
    store, keys = producer.store, producer.store.keys.for_tenant(tenant or producer.tenant)
    if bodies is not None:  # the edits' ids, resolved by the caller before edited_bodies read them
        ids, more, until = list(dict.fromkeys(event_ids or ())), False, 0
    else:
        ids, more, until = _targets(producer, event_ids, tenant, limit, until_ms)
    redriven: list[str] = []
    not_dead: list[str] = []
    for event_id in ids:
        ok, scope_key, publish = store.redrive(keys, event_id, body=(bodies or {}).get(event_id, ""))
        if not ok or scope_key is None:
            not_dead.append(event_id)
            continue
        redriven.append(event_id)
        # every time the script set the scope's drain marker: a drain sent for an earlier event of this loop may
        # have finished and released the scope since, and one skipped here left the scope for the reconcile sweep
        if publish:
            producer.fair.publish(keys.scope_ref(scope_key))
    edited = bodies or {}
    entries = [{"eventId": e, "edited": "1" if e in edited else "0"} for e in redriven]
    audit_each(store.client, keys, "ops", "redrive", actor, entries)  # one round trip
    return {"redriven": redriven, "notDead": not_dead} | _more(more, until)


def _targets(
    producer: Producer,
    event_ids: Sequence[str] | None,
    tenant: str | None,
    limit: int | None,
    until_ms: int | None,
) -> tuple[list[str], bool, int]:
    """The ids to act on (``event_ids`` without repeats; else the ones dead by ``until_ms``, at most ``limit``),
    whether dead events remain beyond them, and the ``until_ms`` used: the next request of the sweep sends it
    back, so an event that dies again meanwhile (a later score) is not taken twice. A sweep begins at Redis's
    time, the clock COMMIT dates a death by (a worker's clock ahead of the web's left events out of "all", one
    behind let a sweep take an event twice)."""
    if event_ids is not None:
        return list(dict.fromkeys(dead_event_ids(producer, event_ids, tenant=tenant))), False, 0
    until = until_ms if until_ms is not None else _redis_ms(producer)
    store = producer.store
    keys = store.keys.for_tenant(tenant or producer.tenant)
    if limit is None:
        return store.dlq_ids(keys, until_ms=until), False, until
    ids = store.dlq_ids(keys, limit + 1, until_ms=until)
    return ids[:limit], len(ids) > limit, until


def dead_event_ids(
    producer: Producer, given: Sequence[str], *, tenant: str | None = None, field: str = "eventIds[{}]"
) -> list[str]:
    """The dead events ``given`` names, in order: an event id as it is; a source id, as ``GET /v1/events/{id}``
    reads one, the one dead event of the tenant with that source id (a source id was answered ``notDead`` while
    its event was dead). An id that breaks the id rule is a 422 naming ``field`` (formatted with its index); a
    source id of several dead events a 409 listing them; anything else is kept as given (``notDead``)."""
    keys = producer.store.keys.for_tenant(tenant or producer.tenant)
    return [_event_id_of(producer, keys, one, field.format(index)) for index, one in enumerate(given)]


def _event_id_of(producer: Producer, keys: Keys, given: str, field: str) -> str:
    if (problem := id_problem(given)) is not None:
        raise InvalidEvent(EventError(code="invalid_id", message=f"{field} {problem.message}", field=field))
    if EVENT_ID.fullmatch(given):
        return given
    dead = [c for c in producer.store.find_by_source(keys, given) if c.get("status") == "dead"]
    if len(dead) > 1:
        names = ", ".join(f"{c['eventId']} ({c.get('sourceType')} in {c.get('scopeKey')})" for c in dead)
        message = f"{field}: source id {given!r} names several dead events: {names}; give one by its event id"
        raise InvalidEvent(EventError(code="ambiguous_source_id", message=message, field=field), 409)
    return str(dead[0]["eventId"]) if dead else given


def _redis_ms(producer: Producer) -> int:
    """Redis's clock, in ms."""
    seconds, micros = producer.store.client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def _more(more: bool, until_ms: int) -> dict[str, Any]:
    """``{"more": true, "until": ms}`` when an "every dead event" request stopped at its limit (absent
    otherwise: the answer to a list of ids, or to a DLQ that fit, is as it always was)."""
    return {"more": True, "until": until_ms} if more else {}


def _keeps_recorded_answer(stored: dict[str, Any], payload: Any, index: int) -> None:
    """A dead ``chat.request``'s edit keeps the routing answer it was recorded with, or has none; an edit that adds
    or changes one is InvalidEvent naming it (a review: a redrive put a made-up decision in the chain, as
    ``POST /v1/events`` no longer lets a caller do)."""
    if stored.get("sourceType") != "chat.request" or not isinstance(payload, dict):
        return
    recorded = stored.get("payload")
    before: dict[str, Any] = recorded if isinstance(recorded, dict) else {}
    for name in RECORDED_ANSWER_FIELDS:
        if name in payload and payload[name] != before.get(name):
            field = f"events[{index}].payload.{name}"
            message = f"{field} is recorded by POST /v1/route; an edit may keep it as it was or leave it out"
            raise InvalidEvent(EventError(code="invalid_field", message=message, field=field))


def edited_bodies(
    producer: Producer, edits: Sequence[tuple[str, Any]], *, tenant: str | None = None
) -> dict[str, str]:
    """The stored bodies of ``edits`` (``(eventId, payload)``) with their payloads replaced, each payload
    validated like a new event's (the SourceEvent rules and the plugins' payload schemas): InvalidEvent names
    ``events[i].payload.<field>``. The event keeps its id, scope, source type and source id, so its dedupe
    identity stays; an unknown id is left out (the redrive answers it ``notDead``)."""
    tenant = tenant or producer.tenant
    store, keys = producer.store, producer.store.keys.for_tenant(tenant)
    bodies: dict[str, str] = {}
    for index, (event_id, payload) in enumerate(edits):
        fields = ("event", "scopeKey", "sourceType", "sourceId")
        found = store.client.hmget(store.locate(keys, event_id).event(event_id), fields)
        stored = body_of({f: str(v) for f, v in zip(fields, found, strict=True) if v is not None}, event_id)
        if stored is None:
            continue
        data = {name: stored[name] for name in _EVENT_FIELDS if stored.get(name) is not None}
        _keeps_recorded_answer(stored, payload, index)
        prepared = producer.validate({**data, "payload": payload}, prefix=f"events[{index}]", tenant=tenant)
        if (
            prepared.event_id != event_id
        ):  # pragma: no cover - the fields that make the id are the stored ones
            raise InvalidEvent(
                EventError(
                    code="invalid_field",
                    message="the edit changes the event's identity",
                    field=f"events[{index}]",
                )
            )
        bodies[event_id] = stored_body({**stored, "payload": payload})
    return bodies


def discard_events(
    producer: Producer,
    event_ids: Sequence[str] | None,
    reason: str,
    *,
    tenant: str | None = None,
    limit: int | None = None,
    until_ms: int | None = None,
    actor: str = CLI_ACTOR,
) -> dict[str, Any]:
    """Discard the given dead events (all of them when ``event_ids`` is None, or the ``limit`` longest dead with
    ``"more": true`` when others remain), each kept as an audit record."""
    store, keys = producer.store, producer.store.keys.for_tenant(tenant or producer.tenant)
    ids, more, until_ms = _targets(producer, event_ids, tenant, limit, until_ms)
    discarded, not_dead = discard(store, keys, ids, reason, actor=actor)
    return {"discarded": discarded, "notDead": not_dead} | _more(more, until_ms)
