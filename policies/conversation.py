"""The ``chat.request`` source: routing as a pipeline chain, so decisions show in traces and metrics.

Payload ``{"request": <chat request>, "protocol"?, "externalSignals"?, "routeResult"?, "configFingerprint"?}``.
The handler emits one ``signal.conversation.<rule>`` signal per evaluated conversation rule of the config
(payload: value, matched, confidence; external signals take part in the decision but are not rules, so they
emit none) and a ``signal.routing.decided`` signal with the decision and the chosen model.

Two ways in: ``POST /v1/route`` records the call with ``routeResult``, the RouteResult it answered (and the
``configFingerprint`` of the config that answered), and the handler emits that answer as it is: the record shows
the decision the caller got, not what the worker's config says by the time the event runs. An event enqueued
directly (``POST /v1/events``, the SDK) carries no answer, and the handler routes it with the configured router
(``AGENT_SIGNAL_ROUTER_CONFIG``). :class:`ChatRequestPayload` refuses at the door, naming the field, a payload
that :func:`~policies.routing.validate_route_input` would refuse (the handler still dead-letters one that
reached the worker another way, and one whose external signal names a rule of the worker's config); a missing
router config is dead-lettered (it will not fix itself by retrying: set it and redrive).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from policies.routing import (
    MAX_EXTERNAL_SIGNALS,
    ConfigError,
    InvalidRouteInput,
    NoDecisionsConfigured,
    ReloadingRouter,
    repeated_signal,
    request_shape_problem,
    validate_route_input,
)
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

__all__ = [
    "RECORDED_ANSWER_FIELDS",
    "ChatRequest",
    "ChatRequestPayload",
    "ExternalSignal",
    "RecordedRoute",
    "RoutingDeps",
    "RoutingSettings",
    "plugin",
    "routing_deps",
]


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must be a non-empty string")
    return value


Name = Annotated[str, AfterValidator(_not_blank)]
# a finite int or float (not a bool, not a string); a confidence from 0 to 1
Number = Annotated[float, Field(strict=True, allow_inf_nan=False)]
Confidence = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0, le=1)]


class ExternalSignal(BaseModel):
    """One external signal, as ``validate_route_input`` checks it."""

    model_config = ConfigDict(extra="allow")

    type: Name
    name: Name
    confidence: Confidence | None = None
    value: Number | None = None
    error: str | None = None


class ChatRequest(BaseModel):
    """The chat request in its protocol's shape; ``model``, when present, is a string."""

    model_config = ConfigDict(extra="allow")

    model: Annotated[str, Field(strict=True)] | None = None


# The payload fields of a chat.request that only POST /v1/route writes (the answer it recorded): the door refuses
# them from a caller (producers/http/routes/events.py), and an edited redrive may only keep them as they were.
RECORDED_ANSWER_FIELDS = ("routeResult", "configFingerprint")


class RecordedRoute(BaseModel):
    """The RouteResult ``POST /v1/route`` answered (``routeResult``), emitted as it is."""

    model_config = ConfigDict(extra="allow")

    facts: dict[str, Any]
    signals: dict[str, dict[str, Any]]
    decision: dict[str, Any] | None
    model: str | None


class ChatRequestPayload(BaseModel):
    """``{"request", "protocol"?, "externalSignals"?}``: what the router can route (``POST /v1/route``'s body),
    plus the answer when ``POST /v1/route`` recorded it (``routeResult``, ``configFingerprint``)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    # protocol first: the request's check reads it (a field validator sees the fields before its own)
    protocol: Literal["openai-chat", "anthropic-messages", "openai-responses"] = "openai-chat"
    request: ChatRequest
    external_signals: list[ExternalSignal] = Field(
        default_factory=list, alias="externalSignals", max_length=MAX_EXTERNAL_SIGNALS
    )
    route_result: RecordedRoute | None = Field(default=None, alias="routeResult")
    config_fingerprint: str | None = Field(default=None, alias="configFingerprint")

    @field_validator("request")
    @classmethod
    def _routable(cls, request: ChatRequest, info: ValidationInfo) -> ChatRequest:
        """The request's parts have their protocol's types, as ``validate_route_input`` checks them: the door
        refuses what the handler would (a review found such an event admitted, then dead-lettered), naming
        ``payload.request`` and, in the message, the part."""
        problem = request_shape_problem(request.model_dump(), str(info.data.get("protocol", "openai-chat")))
        if problem is not None:
            raise ValueError(f"{problem[0]} {problem[1]}")
        return request

    @field_validator("external_signals")
    @classmethod
    def _each_once(cls, external: list[ExternalSignal]) -> list[ExternalSignal]:
        """A ``type:name`` given twice is refused, as the handler refuses it (else admitted, then dead)."""
        repeated = repeated_signal([item.model_dump() for item in external])
        if repeated is not None:
            later, earlier, key = repeated
            raise ValueError(
                f"externalSignals[{later}].name: {key} is also externalSignals[{earlier}]; each type:name may "
                "appear once"
            )
        return external


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


Routed = tuple[dict[str, Any], str | None]  # (the RouteResult, the fingerprint of the config that answered)


def _answered(payload: dict[str, Any]) -> Routed | None:
    """The RouteResult ``POST /v1/route`` answered and recorded, or None for an event that carries none."""
    raw = payload.get("routeResult")
    if raw is None:
        return None
    try:
        RecordedRoute.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(["payload.routeResult", *(str(part) for part in first["loc"])])
        raise PermanentFailure(f"{where}: {first['msg']}", code="INVALID_CHAT_REQUEST") from None
    fingerprint = payload.get("configFingerprint")
    return dict(raw), fingerprint if isinstance(fingerprint, str) else None


def _route_now(
    ctx: HandlerContext, request: dict[str, Any], protocol: str, external: list[dict[str, Any]]
) -> Routed:
    """The RouteResult of the configured router, for an event that carries no answer."""
    holder = ctx.deps(RoutingDeps).router
    if holder is None:
        raise PermanentFailure(
            "AGENT_SIGNAL_ROUTER_CONFIG is not set; chat.request events need a router config",
            code="ROUTER_NOT_CONFIGURED",
        )
    try:
        router = holder.get()
        return router.route(request, protocol, external), router.fingerprint
    except InvalidRouteInput as exc:
        raise PermanentFailure(f"payload.{exc.message}", code="INVALID_CHAT_REQUEST") from None
    except (ConfigError, NoDecisionsConfigured) as exc:
        raise PermanentFailure(f"router config: {exc}", code="ROUTER_CONFIG_INVALID") from None


def _rule_entries(result: dict[str, Any], external: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """The published entries of the config's conversation rules (an external signal's key names no rule)."""
    from_outside = {f"{str(item['type']).strip().lower()}:{item['name']}" for item in external}
    return [
        (key.partition(":")[2], entry)
        for key, entry in result["signals"].items()
        if key.startswith("conversation:") and key not in from_outside
    ]


def _route(source: Source, ctx: HandlerContext) -> Dispatch:
    try:
        request, protocol, external = validate_route_input(source.payload, prefix="payload.")
    except InvalidRouteInput as exc:
        raise PermanentFailure(exc.message, code="INVALID_CHAT_REQUEST") from None
    result, fingerprint = _answered(source.payload) or _route_now(ctx, request, protocol, external)
    signals: list[Signal] = []
    for name, entry in _rule_entries(result, external):
        payload: dict[str, Any] = {"rule": name, **entry}
        signals.append(
            signal_from(source, f"conversation:{name}", f"signal.conversation.{name}", payload, ctx.now())
        )
    decided: dict[str, Any] = {
        "decision": result["decision"],
        "model": result["model"],
        "facts": result["facts"],
        "protocol": protocol,
    }
    if fingerprint is not None:
        decided["configFingerprint"] = fingerprint
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
