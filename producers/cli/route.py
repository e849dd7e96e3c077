"""``agent-signal route``: RouteResults from the command line, for one request, a batch, or a config check.

Input is read as the HTTP door reads a body (producers/http/strict_json.py ``decode_json``: strict JSON, so
``NaN``, ``Infinity``, numbers beyond the float range and lone surrogates are refused, and nesting is bounded),
checked by the same :func:`~policies.routing.validate_route_input` as ``POST /v1/route`` (unknown keys,
``request.model``, external signals), so both refuse the same inputs naming the same fields. ``--protocol``
applies to every envelope that does not name its own, single file or batch line alike. Output is strict JSON
(``allow_nan=False``): a line is one RouteResult, or ``{"line", "error"}`` for a line that was refused. ``-`` with
stdin closed is one line, exit 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from policies.routing import (
    PROTOCOLS,
    ROUTE_REQUEST_FIELDS,
    ConfigError,
    InvalidRouteInput,
    Router,
    load_router,
    validate_route_input,
)
from producers.cli.inputs import stdin_binary
from producers.http.strict_json import FieldError, InvalidBody, decode_json

__all__ = ["run_route"]


# What a bare chat request of each protocol carries: an object without it is no chat request (a mistyped
# envelope, {"requets": …}, was routed as a request with no messages and answered the fallback decision)
CONVERSATION_FIELD = {
    "openai-chat": "messages",
    "anthropic-messages": "messages",
    "openai-responses": "input",
}


def _envelope(data: Any, protocol: str) -> Any:
    """An envelope ``{"request", ...}`` (given ``protocol`` when it names none), or a bare chat request
    wrapped in one; anything else is left for validation to name. An object that is neither (no ``request``,
    and not the protocol's ``messages`` or ``input``) is refused naming ``request``, as the door refuses it."""
    if isinstance(data, dict) and "request" in data:
        return data if "protocol" in data else {**data, "protocol": protocol}
    if isinstance(data, dict):
        field = CONVERSATION_FIELD.get(protocol, "messages")
        if field not in data:
            keys = ", ".join(sorted(map(str, data))[:5]) or "none"
            raise InvalidRouteInput(
                "request",
                f'request: is required: give an envelope {{"request": …}} or a bare {protocol} request with '
                f"{field} (this object's keys: {keys})",
            )
        return {"request": data, "protocol": protocol}
    return data


def _route_one(router: Router, envelope: Any) -> dict[str, Any]:
    request, protocol, external = validate_route_input(envelope, known_keys=ROUTE_REQUEST_FIELDS)
    return router.route(request, protocol, external)


def _dumps(result: dict[str, Any]) -> str:
    return json.dumps(result, allow_nan=False)


def _decode(raw: bytes) -> Any:
    """The JSON value of ``raw`` (never empty), or InvalidBody."""
    if not raw.strip():
        raise InvalidBody(FieldError("invalid_json", "not valid JSON: empty"), "empty")
    return decode_json(raw, require_object=False)


def run_route(
    config: str,
    source: str | None,
    *,
    batch: str | None,
    check: bool,
    protocol: str,
    out: TextIO = sys.stdout,
) -> int:
    """Exit codes: 0 ok, 1 some request was invalid, 2 config invalid, input unreadable or nothing to route."""
    if protocol not in PROTOCOLS:
        print(f"agent-signal route: --protocol must be one of {', '.join(PROTOCOLS)}", file=sys.stderr)
        return 2
    given = [name for name, value in (("REQUEST", source), ("--batch", batch)) if value is not None]
    if len(given) > 1 or (check and given):  # one of them was dropped without a word
        what = " and ".join(given)
        print(f"agent-signal route: {what}: give one input, or --check alone", file=sys.stderr)
        return 2
    try:
        router = load_router(config)
    except ConfigError as exc:
        # --check's errors are its output (stdout, one per line); otherwise stdout holds RouteResults alone
        for error in exc.errors:
            if check:
                print(error, file=out)
            else:
                print(f"agent-signal route: {error}", file=sys.stderr)
        return 2
    if check:
        cfg = router.config
        print(
            f"{config}: ok ({len(cfg.conversation)} conversation rules, {len(cfg.keyword)} keyword rules, "
            f"{len(cfg.decisions)} decisions)",
            file=sys.stderr,
        )
        return 0
    if not router.config.decisions:
        print("agent-signal route: no decisions configured", file=sys.stderr)
        return 2
    if batch is not None:
        return _run_batch(router, batch, protocol, out)
    if source is None:
        print("agent-signal route: give REQUEST.json, - (stdin) or --batch REQUESTS.jsonl", file=sys.stderr)
        return 2
    return _run_single(router, source, protocol, out)


def _run_single(router: Router, source: str, protocol: str, out: TextIO) -> int:
    try:
        data = _decode(stdin_binary().read() if source == "-" else Path(source).read_bytes())
    except OSError as exc:
        print(f"agent-signal route: cannot read {source}: {exc.strerror}", file=sys.stderr)
        return 2
    except InvalidBody as exc:
        print(f"agent-signal route: {source}: {exc.error.message}", file=sys.stderr)
        return 2
    try:
        result = _route_one(router, _envelope(data, protocol))
    except InvalidRouteInput as exc:
        print(f"agent-signal route: {exc.message}", file=sys.stderr)
        return 1
    print(_dumps(result), file=out)
    return 0


def _route_line(router: Router, raw: bytes, protocol: str) -> dict[str, Any] | FieldError:
    """One batch line's RouteResult, or what is wrong with it."""
    try:
        data = _decode(raw)
    except InvalidBody as exc:
        return exc.error
    if isinstance(data, dict) and "protocol" not in data:
        data = {**data, "protocol": protocol}
    try:
        return _route_one(router, data)
    except InvalidRouteInput as exc:
        return FieldError(exc.code, exc.message, exc.field)


def _run_batch(router: Router, path: str, protocol: str, out: TextIO) -> int:
    try:
        stream: BinaryIO = stdin_binary() if path == "-" else open(path, "rb")
    except OSError as exc:
        print(f"agent-signal route: cannot read {path}: {exc.strerror}", file=sys.stderr)
        return 2
    failed = 0
    with stream:
        for number, line in enumerate(stream, start=1):
            if not line.strip():
                continue
            result = _route_line(router, line, protocol)
            if isinstance(result, FieldError):
                failed += 1
                print(f"line {number}: {result.message}", file=sys.stderr)
                error = {"code": result.code, "message": result.message, "field": result.field}
                out.write(_dumps({"line": number, "error": error}) + "\n")
            else:
                out.write(_dumps(result) + "\n")
    return 1 if failed else 0
