"""The ``chat.request`` source: routing as a pipeline chain, so decisions show in traces and metrics.

Payload ``{"request": <chat request>, "protocol"?, "externalSignals"?}``. The handler routes it with the
configured router (``AGENT_SIGNAL_ROUTER_CONFIG``) and emits one ``signal.conversation.<rule>`` signal per
evaluated conversation rule (payload: value, matched, confidence) and a ``signal.routing.decided`` signal
with the decision and the chosen model. A payload that cannot be routed is dead-lettered with the field
named; a missing config too (it will not fix itself by retrying).
"""

from __future__ import annotations

from typing import Any

from policies.routing import ConfigError, NoDecisionsConfigured, ReloadingRouter, validate_route_input
from worker.context import HandlerContext
from worker.errors import PermanentFailure
from worker.nodes import Dispatch, Signal, Source, signal_from
from worker.registry import Policy, define_source_handler

__all__ = ["conversation_policies"]


def _route(source: Source, ctx: HandlerContext) -> Dispatch:
    holder: ReloadingRouter | None = ctx.services.get("router")
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


def conversation_policies() -> list[Policy]:
    return [
        Policy("conversation-routing", [define_source_handler("chat.request", "chat.request:route", _route)])
    ]
