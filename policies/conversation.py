"""The ``chat.request`` source: routing as a pipeline chain, so decisions show in traces and metrics.

Payload ``{"request": <chat request>, "protocol"?, "externalSignals"?}``. The handler routes it with the
configured router (``AGENT_SIGNAL_ROUTER_CONFIG``) and emits one ``signal.conversation.<rule>`` signal per
evaluated conversation rule (payload: value, matched, confidence) and a ``signal.routing.decided`` signal
with the decision and the chosen model. :class:`ChatRequestPayload` refuses at the door, naming the field, a
payload that :func:`~policies.routing.validate_route_input` would refuse (the handler still dead-letters one that
reached the worker another way); a missing router config is dead-lettered (it will not fix itself by retrying:
set it and redrive).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

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

__all__ = ["ChatRequestPayload", "ExternalSignal", "RoutingDeps", "RoutingSettings", "plugin", "routing_deps"]


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must be a non-empty string")
    return value


Name = Annotated[str, AfterValidator(_not_blank)]
Number = Annotated[float, Field(strict=True)]  # an int or a float; not a bool, not a string


class ExternalSignal(BaseModel):
    """One external signal, as ``validate_route_input`` checks it."""

    model_config = ConfigDict(extra="allow")

    type: Name
    name: Name
    confidence: Number | None = None
    value: Number | None = None
    error: str | None = None


class ChatRequestPayload(BaseModel):
    """``{"request", "protocol"?, "externalSignals"?}``: what the router can route (``POST /v1/route``'s body)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    request: dict[str, Any]
    protocol: Literal["openai-chat", "anthropic-messages", "openai-responses"] = "openai-chat"
    external_signals: list[ExternalSignal] = Field(default_factory=list, alias="externalSignals")


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
    return Plugin(
        "conversation",
        policies=_policies(),
        settings=RoutingSettings,
        services=routing_deps,
        source_types=("chat.request",),
        payload_schemas={"chat.request": ChatRequestPayload},
    )


def _policies() -> list[Policy]:
    return [
        Policy("conversation-routing", [define_source_handler("chat.request", "chat.request:route", _route)])
    ]
