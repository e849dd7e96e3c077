"""Conversation signals and routing decisions (vLLM Semantic Router's conversation family, Version C).

Pure library: ``load_router_text(yaml) -> Router``; ``Router.route(request, protocol, external_signals)``
returns the RouteResult dict of CONTRACT.md. ``validate_route_input`` checks what a route call carries
(:mod:`policies.routing.envelope`).
"""

from __future__ import annotations

from policies.routing.config import ConfigError, RouterConfig, parse_router_config
from policies.routing.engine import NoDecisionsConfigured, Router
from policies.routing.envelope import (
    MAX_EXTERNAL_SIGNALS,
    RECORD_FIELDS,
    ROUTE_REQUEST_FIELDS,
    InvalidRouteInput,
    repeated_signal,
    request_shape_problem,
    validate_route_input,
)
from policies.routing.facts import PROTOCOLS, Facts, extract_facts
from policies.routing.loader import ReloadingRouter, load_router, load_router_text

__all__ = [
    "MAX_EXTERNAL_SIGNALS",
    "PROTOCOLS",
    "RECORD_FIELDS",
    "ROUTE_REQUEST_FIELDS",
    "ConfigError",
    "Facts",
    "InvalidRouteInput",
    "NoDecisionsConfigured",
    "ReloadingRouter",
    "Router",
    "RouterConfig",
    "extract_facts",
    "load_router",
    "load_router_text",
    "parse_router_config",
    "repeated_signal",
    "request_shape_problem",
    "validate_route_input",
]
