"""``agent-signal route``: RouteResults from the command line, for one request, a batch, or a config check."""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from policies.routing import (
    PROTOCOLS,
    ConfigError,
    NoDecisionsConfigured,
    Router,
    load_router,
    validate_route_input,
)

__all__ = ["run_route"]


def _envelope(data: Any, protocol: str) -> Any:
    """A single request file may hold the envelope ``{"request", ...}`` or just the chat request."""
    if isinstance(data, dict) and isinstance(data.get("request"), dict):
        return data
    return {"request": data, "protocol": protocol}


def _route_one(router: Router, envelope: Any) -> dict[str, Any]:
    request, protocol, external = validate_route_input(envelope)
    return router.route(request, protocol, external)


def run_route(
    config: str,
    source: str | None,
    *,
    batch: str | None,
    check: bool,
    protocol: str,
    out: TextIO = sys.stdout,
) -> int:
    """Exit codes: 0 ok, 1 some request was invalid (batch), 2 config invalid or nothing to route."""
    if protocol not in PROTOCOLS:
        print(f"agent-signal route: --protocol must be one of {', '.join(PROTOCOLS)}", file=sys.stderr)
        return 2
    try:
        router = load_router(config)
    except ConfigError as exc:
        for error in exc.errors:
            print(error, file=out)
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
    try:
        text = sys.stdin.read() if source == "-" else open(source, encoding="utf-8").read()
        data = json.loads(text)
    except OSError as exc:
        print(f"agent-signal route: cannot read {source}: {exc.strerror}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"agent-signal route: {source} is not valid JSON: {exc}", file=sys.stderr)
        return 2
    try:
        result = _route_one(router, _envelope(data, protocol))
    except ValueError as exc:
        print(f"agent-signal route: {exc.args[-1]}", file=sys.stderr)
        return 1
    print(json.dumps(result), file=out)
    return 0


def _run_batch(router: Router, path: str, protocol: str, out: TextIO) -> int:
    try:
        stream = sys.stdin if path == "-" else open(path, encoding="utf-8")
    except OSError as exc:
        print(f"agent-signal route: cannot read {path}: {exc.strerror}", file=sys.stderr)
        return 2
    failed = 0
    with stream:
        for number, line in enumerate(stream, start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
                if isinstance(data, dict) and "protocol" not in data:
                    data = {**data, "protocol": protocol}
                result: dict[str, Any] = _route_one(router, data)
            except NoDecisionsConfigured:
                raise
            except ValueError as exc:
                failed += 1
                message = exc.args[-1] if len(exc.args) == 2 else f"not valid JSON ({exc})"
                field = exc.args[0] if len(exc.args) == 2 else None
                result = {
                    "line": number,
                    "error": {"code": "invalid_field", "message": message, "field": field},
                }
                print(f"line {number}: {message}", file=sys.stderr)
            out.write(json.dumps(result) + "\n")
    return 1 if failed else 0
