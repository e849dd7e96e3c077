"""What a route call may carry: ``{"request", "protocol"?, "externalSignals"?}``, checked the same way by every
surface (``POST /v1/route``, ``agent-signal route``, the ``chat.request`` handler), each refusal naming its field.

* ``request`` is a JSON object whose ``model``, when present, is a string (it comes back as the answer's
  ``model``), and whose parts the facts are read from have their protocol's types: ``messages`` (``input`` for
  ``openai-responses``, which may also be a string) an array of objects, each ``role`` a string; ``tools`` (and
  ``functions``) an array; Anthropic's ``system`` a string or an array.
* ``externalSignals`` holds at most :data:`MAX_EXTERNAL_SIGNALS` entries ``{"type", "name", "confidence"?,
  "value"?, "error"?}``: ``type`` and ``name`` non-blank strings, ``confidence`` a finite number from 0 to 1,
  ``value`` a finite number (an integer too large for a float is not one), ``error`` a string; no two with the
  same :func:`external_key` (``type`` trimmed and lower-cased, ``name`` as given), the later one named by
  ``externalSignals[i].name`` (two answers for one signal: one matched, one with an error, made a RouteResult
  that contradicted itself).
* ``known_keys``: where the surface refuses keys it does not read (a misspelt ``externalSignal`` would otherwise
  be ignored unseen), the keys it reads; ``POST /v1/route`` and the CLI pass :data:`ROUTE_REQUEST_FIELDS`.

Whether an external signal names a configured internal rule depends on the config: :meth:`Router.route
<policies.routing.engine.Router.route>` refuses it with the same :class:`InvalidRouteInput`.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from policies.routing.facts import PROTOCOLS

__all__ = [
    "MAX_EXTERNAL_SIGNALS",
    "RECORD_FIELDS",
    "ROUTE_FIELDS",
    "ROUTE_REQUEST_FIELDS",
    "InvalidRouteInput",
    "external_key",
    "repeated_signal",
    "request_shape_problem",
    "validate_route_input",
]

MAX_EXTERNAL_SIGNALS = 256  # far above any real classifier set; each one is matched and published per request
ROUTE_FIELDS = ("request", "protocol", "externalSignals")
RECORD_FIELDS = ("requestId", "scopeKey", "userId", "agentId", "workspaceId")  # the chat.request record's ids
ROUTE_REQUEST_FIELDS = (
    *ROUTE_FIELDS,
    *RECORD_FIELDS,
)  # POST /v1/route's body; a CLI input reads the first three


class InvalidRouteInput(ValueError):
    """A route input the router refuses: ``args`` is ``(field, message)``; ``code`` is the error code the HTTP
    answer and the CLI's batch line use (``invalid_field``, or ``unknown_field`` for a key nobody reads)."""

    def __init__(self, field: str | None, message: str, code: str = "invalid_field") -> None:
        super().__init__(field, message)
        self.field = field
        self.message = message
        self.code = code


def _finite(value: Any) -> float | None:
    """``value`` as a float when it is a finite JSON number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer beyond the float range
        return None
    return number if math.isfinite(number) else None


def _number_problem(key: str, value: Any) -> str | None:
    number = _finite(value)
    if number is None:
        return "must be a finite number"
    if key == "confidence" and not 0.0 <= number <= 1.0:
        return "must be between 0 and 1"
    return None


# The chat request's parts the facts are read from, by protocol: a list where a list is read (a string or a
# number there was routed as an empty conversation, with every fact 0), and the types the parts may take.
_LISTS: dict[str, tuple[str, ...]] = {
    "openai-chat": ("messages", "tools", "functions"),
    "anthropic-messages": ("messages", "tools"),
    "openai-responses": ("tools",),
}
_TEXT_OR_LIST: dict[str, tuple[str, ...]] = {
    "openai-chat": (),
    "anthropic-messages": ("system",),
    "openai-responses": ("input",),
}


def request_shape_problem(request: Mapping[str, Any], protocol: str) -> tuple[str, str] | None:
    """(the field under ``request``, what is wrong) when a part the facts are read from has the wrong type."""
    for key in _LISTS[protocol]:
        if request.get(key) is not None and not isinstance(request[key], list):
            return f"request.{key}", "must be an array"
    for key in _TEXT_OR_LIST[protocol]:
        if request.get(key) is not None and not isinstance(request[key], str | list):
            return f"request.{key}", "must be a string or an array"
    items_key = "input" if protocol == "openai-responses" else "messages"
    items = request.get(items_key)
    for i, item in enumerate(items if isinstance(items, list) else ()):
        if not isinstance(item, Mapping):
            return f"request.{items_key}[{i}]", "must be an object"
        if item.get("role") is not None and not isinstance(item["role"], str):
            return f"request.{items_key}[{i}].role", "must be a string"
    return None


def _signal_problem(item: Any) -> tuple[str, str] | None:
    """(the key within the entry, or "" for the entry itself, and what is wrong), or None."""
    if not isinstance(item, Mapping):
        return "", "must be an object"
    for key in ("type", "name"):
        if not isinstance(item.get(key), str) or not item[key].strip():
            return key, "is required and must be a non-empty string"
    for key in ("confidence", "value"):
        if item.get(key) is not None and (problem := _number_problem(key, item[key])) is not None:
            return key, problem
    if item.get("error") is not None and not isinstance(item.get("error"), str):
        return "error", "must be a string"
    return None


def _refuse_unknown_keys(body: Mapping[str, Any], known_keys: Collection[str], prefix: str) -> None:
    for key in body:
        if key not in known_keys:
            message = f"{key} is not a field of a route request (its fields: {', '.join(known_keys)})"
            raise InvalidRouteInput(f"{prefix}{key}", message, "unknown_field")


def validate_route_input(
    body: Any, *, prefix: str = "", known_keys: Collection[str] | None = None
) -> tuple[dict[str, Any], str, list[dict[str, Any]]]:
    """Check ``{"request", "protocol"?, "externalSignals"?}`` (see the module docstring); returns the three
    parts or raises :class:`InvalidRouteInput` naming the offending field (``prefix`` + its path)."""

    def fail(field: str, message: str, code: str = "invalid_field") -> InvalidRouteInput:
        return InvalidRouteInput(f"{prefix}{field}", f"{prefix}{field}: {message}", code)

    if not isinstance(body, Mapping):
        raise InvalidRouteInput(prefix.rstrip(".") or None, "the body must be a JSON object")
    if known_keys is not None:
        _refuse_unknown_keys(body, known_keys, prefix)
    request = body.get("request")
    if not isinstance(request, Mapping):
        raise fail("request", "is required and must be a JSON object")
    if request.get("model") is not None and not isinstance(request.get("model"), str):
        raise fail("request.model", "must be a string")
    protocol = body.get("protocol", "openai-chat")
    if protocol not in PROTOCOLS:
        raise fail("protocol", f"must be one of {', '.join(PROTOCOLS)}")
    if (shape := request_shape_problem(request, str(protocol))) is not None:
        raise fail(*shape)
    external = body.get("externalSignals", [])
    if not isinstance(external, list):
        raise fail("externalSignals", "must be an array")
    if len(external) > MAX_EXTERNAL_SIGNALS:
        raise fail(
            "externalSignals", f"holds {len(external)} entries; at most {MAX_EXTERNAL_SIGNALS} are allowed"
        )
    for i, item in enumerate(external):
        problem = _signal_problem(item)
        if problem is not None:
            key, message = problem
            raise fail(f"externalSignals[{i}]" + (f".{key}" if key else ""), message)
    if (repeat := repeated_signal(external)) is not None:
        later, first, key = repeat
        message = f"{key} is also {prefix}externalSignals[{first}]; each type:name may appear once"
        raise fail(f"externalSignals[{later}].name", message)
    return dict(request), str(protocol), [dict(item) for item in external]


def external_key(item: Mapping[str, Any]) -> str:
    """The ``type:name`` an external signal is matched and published under: ``type`` trimmed and lower-cased,
    ``name`` as given."""
    return f"{str(item['type']).strip().lower()}:{item['name']}"


def repeated_signal(external: Sequence[Mapping[str, Any]]) -> tuple[int, int, str] | None:
    """(the index of the first entry whose :func:`external_key` an earlier entry has, that earlier index, the
    key), or None when every key appears once."""
    first_of: dict[str, int] = {}
    for i, item in enumerate(external):
        key = external_key(item)
        if key in first_of:
            return i, first_of[key], key
        first_of[key] = i
    return None
