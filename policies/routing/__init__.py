"""Conversation signals and routing decisions (vLLM Semantic Router's conversation family, Version C).

Pure library: ``load_router_text(yaml) -> Router``; ``Router.route(request, protocol, external_signals)``
returns the RouteResult dict of CONTRACT.md. ``validate_external_signals`` checks the external signal list.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policies.routing.config import ConfigError, RouterConfig, parse_router_config
from policies.routing.engine import NoDecisionsConfigured, Router
from policies.routing.facts import PROTOCOLS, Facts, extract_facts
from policies.routing.loader import ReloadingRouter, load_router, load_router_text

__all__ = [
    "PROTOCOLS",
    "ConfigError",
    "Facts",
    "NoDecisionsConfigured",
    "ReloadingRouter",
    "Router",
    "RouterConfig",
    "extract_facts",
    "load_router",
    "load_router_text",
    "parse_router_config",
    "validate_route_input",
]


def validate_route_input(body: Any, *, prefix: str = "") -> tuple[dict[str, Any], str, list[dict[str, Any]]]:
    """Check ``{"request", "protocol"?, "externalSignals"?}``; returns the three parts or raises
    ``ValueError((field, message))`` naming the offending field."""

    def fail(field: str, message: str) -> ValueError:
        return ValueError(f"{prefix}{field}", f"{prefix}{field}: {message}")

    if not isinstance(body, Mapping):
        raise ValueError(prefix.rstrip(".") or None, "the body must be a JSON object")
    request = body.get("request")
    if not isinstance(request, Mapping):
        raise fail("request", "is required and must be a JSON object")
    protocol = body.get("protocol", "openai-chat")
    if protocol not in PROTOCOLS:
        raise fail("protocol", f"must be one of {', '.join(PROTOCOLS)}")
    external = body.get("externalSignals", [])
    if not isinstance(external, list):
        raise fail("externalSignals", "must be an array")
    checked: list[dict[str, Any]] = []
    for i, item in enumerate(external):
        where = f"externalSignals[{i}]"
        if not isinstance(item, Mapping):
            raise fail(where, "must be an object")
        for key in ("type", "name"):
            if not isinstance(item.get(key), str) or not item[key].strip():
                raise fail(f"{where}.{key}", "is required and must be a non-empty string")
        for key in ("confidence", "value"):
            v = item.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
                raise fail(f"{where}.{key}", "must be a number")
        if item.get("error") is not None and not isinstance(item.get("error"), str):
            raise fail(f"{where}.error", "must be a string")
        checked.append(dict(item))
    return dict(request), str(protocol), checked
