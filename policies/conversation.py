"""The ``chat.request`` source: routing as a pipeline chain, so decisions show in traces and metrics.

Payload ``{"request": <chat request>, "protocol"?, "externalSignals"?}``. The handler routes it with the
configured router (``AGENT_SIGNAL_ROUTER_CONFIG``) and emits one ``signal.conversation.<rule>`` signal per
evaluated conversation rule (payload: value, matched, confidence) and a ``signal.routing.decided`` signal
with the decision and the chosen model. A payload that cannot be routed is dead-lettered with the field
named; a missing config too (it will not fix itself by retrying).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from policies.routing import ConfigError, NoDecisionsConfigured, ReloadingRouter, validate_route_input
from worker.plugin import (
    Dispatch,
    HandlerContext,
    PermanentFailure,
    Plugin,
    PluginRuntime,
    PluginSettings,
    Policy,
    Signal,
    Source,
    define_source_handler,
    signal_from,
)

__all__ = ["RoutingDeps", "RoutingSettings", "plugin", "routing_deps"]


class RoutingSettings(PluginSettings):
    """``AGENT_SIGNAL_ROUTER_CONFIG`` and ``AGENT_SIGNAL_ROUTE_RECORD_EVENTS``."""

    router_config: str | None = None  # path of a vLLM Semantic Router YAML; reloaded when it changes
    route_record_events: bool = True  # POST /v1/route also enqueues a chat.request source event


@dataclass(frozen=True, slots=True)
class RoutingDeps:
    """The configured router (None without ``AGENT_SIGNAL_ROUTER_CONFIG``)."""

    router: ReloadingRouter | None


def routing_deps(runtime: PluginRuntime) -> RoutingDeps:
    config = runtime.settings_for(RoutingSettings).router_config
    return RoutingDeps(ReloadingRouter(config) if config else None)


def _route(source: Source, ctx: HandlerContext) -> Dispatch:
    holder = ctx.deps(RoutingDeps).router
    if holder is None:
        raise PermanentFailure(
            "AGENT_SIGNAL_ROUTER_CONFIG is not set; chat.request events need a router config",
            code="ROUTER_NOT_CONFIGURED",
        )
    try:
        request, protocol, external = validate_route_input(source.payload, prefix="payload.")
    except ValueError as exc:
        raise PermanentFailure(str(exc.args[-1]), code="INVALID_CHAT_REQUEST") from None
    try:
        result = holder.get().route(request, protocol, external)
    except (ConfigError, NoDecisionsConfigured) as exc:
        raise PermanentFailure(f"router config: {exc}", code="ROUTER_CONFIG_INVALID") from None
    signals: list[Signal] = []
    for key, entry in result["signals"].items():
        kind, _, name = key.partition(":")
        if kind != "conversation":
            continue
        payload: dict[str, Any] = {"rule": name, **entry}
        signals.append(
            signal_from(source, f"conversation:{name}", f"signal.conversation.{name}", payload, ctx.now())
        )
    decided = {
        "decision": result["decision"],
        "model": result["model"],
        "facts": result["facts"],
        "protocol": protocol,
    }
    signals.append(signal_from(source, "routing-decision", "signal.routing.decided", decided, ctx.now()))
    return Dispatch(signals=signals)


def plugin() -> Plugin:
    """Conversation signals and routing decisions for ``chat.request`` events."""
    return Plugin("conversation", policies=_policies(), settings=RoutingSettings, services=routing_deps)


def _policies() -> list[Policy]:
    return [
        Policy("conversation-routing", [define_source_handler("chat.request", "chat.request:route", _route)])
    ]
