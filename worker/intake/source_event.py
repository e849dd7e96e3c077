"""The event model at the door: the SourceEvent that apps (and handlers' follow-ups) send, its validation,
and the errors that name the offending field.

Validation happens before anything is stored (SDK, HTTP, CLI and the engine's emitter alike) with pydantic
v2; an invalid event never reaches Redis. :func:`field_error` is the one mapper from a pydantic
``ValidationError`` to an :class:`EventError`. Errors are :class:`EventError` ``{code, message, field}`` where ``field`` is a JSON path such as
``payload`` or ``events[3].sourceId``; they and the exceptions that carry them live in worker/intake/refusals.py
(re-exported here), which the SDK's HTTP client and the CLI import without this module's models.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from worker.core.clock import now_ms as clock_now_ms
from worker.core.dedupe import dedupe_key, event_id_for
from worker.core.ids import Id, NameId, UserId, payload_id_errors, user_id_problem
from worker.core.nodes import ChainRef, Source
from worker.core.scope import derive_scope_key
from worker.core.source_types import SourceTypePolicy
from worker.documents.event_body import root_body, stored_body
from worker.documents.projection import MAX_ISO_MS
from worker.intake.refusals import EventError, InvalidEvent, StoreUnavailable, as_single
from worker.store.events import PreparedEvent

__all__ = [
    "MAX_PAYLOAD_DEPTH",
    "EnqueueResult",
    "EventError",
    "InvalidEvent",
    "PayloadTooDeep",
    "SourceEvent",
    "StoreUnavailable",
    "as_single",
    "field_error",
    "field_path",
    "parse_event",
    "payload_text",
    "prepare",
    "pydantic_error",
    "resolve_user",
    "with_traceparent",
]


class SourceEvent(BaseModel):
    """What a producer sends. ``scopeKey`` and ``timestamp`` are filled in when absent."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", strict=True)

    source_type: str = Field(min_length=1, max_length=200)
    source_id: Id  # ids follow one rule (worker/core/ids.py): 1-256 of letters, digits and _ . : @ / + = - #
    payload: dict[str, Any]
    scope_key: Id | None = None
    # Unix ms up to 9999-12-31T23:59:59.999Z: the last instant ISO 8601 (createdAt) names, below 2**53 for JS
    timestamp: int | None = Field(default=None, ge=0, le=MAX_ISO_MS)
    user_id: UserId | None = None  # the id rule without ':' nor '/' (worker/core/ids.py)
    agent_id: NameId | None = None
    workspace_id: NameId | None = None

    @field_validator("source_type")
    @classmethod
    def _dotted(cls, value: str) -> str:
        if value != value.strip() or " " in value:
            raise ValueError("must not contain spaces")
        return value

    @field_validator("payload")
    @classmethod
    def _payload_ids(cls, value: dict[str, Any]) -> dict[str, Any]:
        """The payload's own userId/agentId/workspaceId/topicId follow the id rule (a 422 names payload.<id>)."""
        errors = payload_id_errors(value)
        if errors:
            raise ValidationError.from_exception_data("SourceEvent", errors)
        return value


class EnqueueResult(BaseModel):
    """One answer of ``enqueue``: the event's id and whether it was new."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    event_id: str
    source_id: str
    status: str


def field_path(loc: Iterable[int | str], prefix: str = "") -> str | None:
    """``("messages", 0, "role")`` → ``messages.0.role``; under ``prefix`` ``events[3]`` → ``events[3].x``."""
    parts = [prefix] if prefix else []
    parts += [str(part) for part in loc]
    return ".".join(parts) or None


def pydantic_error(
    details: Mapping[str, Any], *, prefix: str = "", model_name: str | None = None, subject: str = "the body"
) -> EventError:
    """The one mapper from a pydantic error (one item of ``ValidationError.errors()``) to an EventError,
    used by the door for events and by every HTTP route for its body and parameters."""
    field = field_path(details.get("loc", ()), prefix)
    kind = details.get("type", "")
    if kind == "missing":
        return EventError(code="missing_field", message=f"{field} is required", field=field)
    if kind == "extra_forbidden":
        where = f"a {model_name} field" if model_name else "a field of this request"
        return EventError(code="unknown_field", message=f"{field} is not {where}", field=field)
    if kind in ("model_type", "dict_type"):
        return EventError(
            code="invalid_type", message=f"{field or subject} must be a JSON object", field=field
        )
    return EventError(
        code="invalid_field", message=f"{field}: {details.get('msg', 'is invalid')}", field=field
    )


def field_error(exc: ValidationError, prefix: str = "") -> EventError:
    """The first error of a SourceEvent validation as ``{code, message, field}`` under ``prefix``."""
    first = exc.errors(include_url=False)[0]
    return pydantic_error(first, prefix=prefix, model_name="SourceEvent", subject="event")


def parse_event(data: Any, types: SourceTypePolicy, *, prefix: str = "") -> SourceEvent:
    """Validate one decoded JSON value as a SourceEvent, or raise InvalidEvent naming the field."""
    if not isinstance(data, dict):
        raise InvalidEvent(
            EventError(code="invalid_type", message="an event must be a JSON object", field=prefix or None)
        )
    try:
        event = SourceEvent.model_validate(data)
    except ValidationError as exc:
        raise InvalidEvent(field_error(exc, prefix)) from None
    if not types.accepts(event.source_type):
        field = field_path(("sourceType",), prefix) or "sourceType"
        near = types.nearest(event.source_type)
        hint = f"did you mean {near!r}? or " if near else ""
        raise InvalidEvent(
            EventError(
                code="unknown_source_type",
                message=f"{field}: unknown source type {event.source_type!r} ({hint}a loaded plugin declares "
                "it, or list it in AGENT_SIGNAL_EXTRA_SOURCE_TYPES, or set AGENT_SIGNAL_ALLOW_UNKNOWN_SOURCE_TYPES=true)",
                field=field,
            )
        )
    return event


USER_FIELD = "userId"  # the event's own user field, and the payload's (read by handlers of every type)


def resolve_user(event: SourceEvent, user_fields: Sequence[str] = (), *, prefix: str = "") -> str | None:
    """The event's user: its ``userId``, else the payload's ``userId``, else the first of ``user_fields`` (dotted
    payload paths where a plugin's handlers read a user, e.g. ``selfIteration.userId``) that names one. Every
    other of those fields that names a user must name the same one: else InvalidEvent (422
    ``user_mismatch`` naming the field), so no handler ever reads a user other than the one the credential
    stamped (or the event names)."""
    found: list[tuple[str, object]] = [(USER_FIELD, event.user_id)]
    for path in (USER_FIELD, *user_fields):
        found.append((f"payload.{path}", _at(event.payload, path.split("."))))
    user: str | None = None
    for field, value in found:
        if value is None:
            continue
        where = field_path((field,), prefix) or field
        if not isinstance(value, str) or not value:
            message = f"{where} must be a user id (a non-empty string)"
            raise InvalidEvent(EventError(code="invalid_field", message=message, field=where))
        if (problem := user_id_problem(value)) is not None:  # every field a user is read from: one rule
            raise InvalidEvent(
                EventError(code="invalid_id", message=f"{where} {problem.message}", field=where)
            )
        if user is None:
            user = value
        elif value != user:
            message = f"{where} names user {value!r}; the event's user is {user!r} (give one user or none)"
            raise InvalidEvent(EventError(code="user_mismatch", message=message, field=where))
    return user


def _at(data: Mapping[str, Any], path: Sequence[str]) -> object:
    """The value at ``path`` in nested objects, or None where the path ends early."""
    value: object = data
    for part in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


MAX_PAYLOAD_DEPTH = 64  # nesting levels of a payload (the HTTP door refuses a body past 64 before parsing it)


class PayloadTooDeep(ValueError):
    """A payload nests deeper than :data:`MAX_PAYLOAD_DEPTH` (the worker could not read it back: pydantic's
    JSON reader stops at a few hundred levels)."""


def payload_text(payload: Mapping[str, Any]) -> str | None:
    """The payload's compact JSON as the stored body holds it; None when it holds a nan or inf (not JSON) or a
    key that is not a ``str`` (only a Python caller can give one, and json and the Source's serialiser name
    ``None``, ``True`` or a float subclass differently): the caller then takes the Source's path. Raises
    :class:`PayloadTooDeep` (a loop too: it never ends), then TypeError for a value JSON has no form for."""
    str_keys = _str_keys_within(payload, MAX_PAYLOAD_DEPTH)
    try:
        text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except ValueError:  # a nan or an inf
        return None
    return text if str_keys else None


_NESTED = (Mapping, list, tuple)


def _str_keys_within(payload: Mapping[str, Any], max_depth: int) -> bool:
    """Every object key at any depth is a ``str`` (JSON's own kind); raises :class:`PayloadTooDeep` at a level
    past ``max_depth`` (the payload itself is level 1). A stack of its own, not recursion: a payload deeper than
    Python's recursion limit is answered too."""
    str_keys = True
    stack: list[tuple[Any, int]] = [(payload, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > max_depth:
            raise PayloadTooDeep(f"nests deeper than {max_depth} levels (or contains itself)")
        if isinstance(value, Mapping):
            for key, item in value.items():
                if type(key) is not str:
                    str_keys = False
                if isinstance(item, _NESTED):
                    stack.append((item, depth + 1))
        else:
            stack.extend((item, depth + 1) for item in value if isinstance(item, _NESTED))
    return str_keys


def prepare(
    event: SourceEvent,
    *,
    now_ms: int | None = None,
    traceparent: str | None = None,
    tenant: str = "default",
    user_id: str | None = None,
    payload_json: str | None = None,
) -> PreparedEvent:
    """Resolve scope and timestamp, derive the ids, and write the stored body of the Source the worker will run
    (:func:`~worker.documents.event_body.root_body`). ``user_id`` is the event's user (:func:`resolve_user`):
    the Source carries it, whichever field named it. ``payload_json``: the payload's :func:`payload_text`, when
    the caller has it."""
    user_id = user_id or event.user_id
    scope_key = event.scope_key or derive_scope_key(
        event.payload, user_id=event.user_id, agent_id=event.agent_id
    )
    key = dedupe_key(scope_key, event.source_type, event.source_id)
    event_id = event_id_for(key, tenant)
    timestamp = event.timestamp if event.timestamp is not None else (now_ms or clock_now_ms())
    if payload_json is None:
        payload_json = payload_text(event.payload)
    if payload_json is not None:  # without what the event's hash holds (worker/documents/event_body.py)
        body = root_body(
            timestamp,
            payload_json,
            user_id=user_id,
            agent_id=event.agent_id,
            workspace_id=event.workspace_id,
            traceparent=traceparent,
        )
    else:  # a nan or inf (the Source's serialiser writes null), or a key not a str: the Source's own form
        source = Source(
            source_id=event.source_id,
            source_type=event.source_type,
            scope_key=scope_key,
            timestamp=timestamp,
            payload=event.payload,
            chain=ChainRef(chain_id=f"chain:{event.source_id}", root_source_id=event.source_id),
            user_id=user_id,
            agent_id=event.agent_id,
            workspace_id=event.workspace_id,
            event_id=event_id,
            traceparent=traceparent,
        )
        body = stored_body(source.to_json_dict())
    return PreparedEvent(
        event_id=event_id,
        scope_key=scope_key,
        source_id=event.source_id,
        body=body,
        source_type=event.source_type,
        user_id=user_id,
        tenant=tenant,
    )


def with_traceparent(prepared: PreparedEvent, traceparent: str | None) -> PreparedEvent:
    """The same event carrying the W3C trace context of its enqueue."""
    if not traceparent:
        return prepared
    data = json.loads(prepared.body)
    data["traceparent"] = traceparent
    body = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return PreparedEvent(
        prepared.event_id,
        prepared.scope_key,
        prepared.source_id,
        body,
        prepared.source_type,
        prepared.user_id,
        prepared.tenant,
    )
