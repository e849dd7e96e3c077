"""The activity plugin: per-scope activity bookkeeping, plus the tool-outcome payload check.

It exists so a fresh install does something visible end to end (``make run``): every merged bot message and
tool outcome becomes a signal, and each signal an idempotent action that counts activity per scope in
Redis (an effect staged in ``ctx.effects``, so a redelivered event never counts twice). A tool outcome
without ``tool.identifier`` or ``outcome.status`` can never be processed (LobeHub's tool-outcome procedure
needs both): :class:`ToolOutcomePayload` refuses it at the door (a 422 naming ``payload.tool.identifier`` or
``payload.outcome.status``), and the handler still dead-letters one that reached the worker another way (a
door whose plugins differ from the worker's), with an error naming the field.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from worker.plugin import (
    Action,
    Dispatch,
    ExecutorResult,
    HandlerContext,
    PermanentFailure,
    Plugin,
    Policy,
    Signal,
    Source,
    action_from,
    applied,
    define_action_handler,
    define_signal_handler,
    define_source_handler,
    signal_from,
)

__all__ = ["ACTIVITY_ACTION", "SOURCE_TYPES", "BotMessagePayload", "ToolOutcomePayload", "plugin"]

ACTIVITY_ACTION = "action.activity.record"
SOURCE_TYPES = ("bot.message.merged", "tool.outcome.completed", "tool.outcome.failed")
ToolStatus = Literal["succeeded", "skipped", "failed"]
TOOL_STATUSES: tuple[str, ...] = get_args(ToolStatus)


class _Payload(BaseModel):
    model_config = ConfigDict(extra="allow", alias_generator=to_camel, populate_by_name=True)


class ToolRef(_Payload):
    identifier: str
    api_name: str | None = None


class ToolResult(_Payload):
    status: ToolStatus


class ToolOutcomePayload(_Payload):
    """What the tool-outcome handler needs: ``tool.identifier`` and ``outcome.status`` (LobeHub's required
    fields; a failed outcome may come as ``tool.outcome.completed`` too: the handler takes any of the three)."""

    tool: ToolRef
    outcome: ToolResult


class BotMessagePayload(_Payload):
    """A merged bot message: the length of its text is counted (none counts as empty)."""

    message: str | None = None


def _on_user_message(source: Source, ctx: HandlerContext) -> Dispatch:
    message = source.payload.get("message")
    text = message if isinstance(message, str) else ""
    payload = {"messageId": source.payload.get("messageId", source.source_id), "length": len(text)}
    return Dispatch(
        signals=[signal_from(source, "message-received", "signal.message.received", payload, ctx.now())]
    )


def _on_tool_outcome(source: Source, ctx: HandlerContext) -> Dispatch:
    tool = source.payload.get("tool")
    outcome = source.payload.get("outcome")
    if not isinstance(tool, dict) or not isinstance(tool.get("identifier"), str):
        raise PermanentFailure("payload.tool.identifier is required", code="INVALID_TOOL_OUTCOME")
    if not isinstance(outcome, dict) or outcome.get("status") not in TOOL_STATUSES:
        raise PermanentFailure(
            "payload.outcome.status must be one of succeeded, skipped, failed", code="INVALID_TOOL_OUTCOME"
        )
    payload = {"identifier": tool["identifier"], "apiName": tool.get("apiName"), "status": outcome["status"]}
    return Dispatch(signals=[signal_from(source, "tool-outcome", "signal.tool.outcome", payload, ctx.now())])


def _plan_activity(signal: Signal, ctx: HandlerContext) -> Dispatch:
    field = "messages" if signal.signal_type == "signal.message.received" else "toolOutcomes"
    payload: dict[str, Any] = {"field": field}
    return Dispatch(actions=[action_from(signal, "activity", ACTIVITY_ACTION, payload, ctx.now())])


def _record_activity(action: Action, ctx: HandlerContext) -> ExecutorResult:
    field = str(action.payload.get("field", "events"))
    ctx.effects.call("HINCRBY", ctx.keys.activity(ctx.scope_key), field, 1)
    return applied(action, ctx, detail=f"Counted one {field[:-1]} for {ctx.scope_key}.")


def plugin() -> Plugin:
    """Every merged bot message and tool outcome counts once per scope."""
    return Plugin(
        "activity",
        policies=_policies(),
        source_types=SOURCE_TYPES,
        payload_schemas={
            "bot.message.merged": BotMessagePayload,
            "tool.outcome.completed": ToolOutcomePayload,
            "tool.outcome.failed": ToolOutcomePayload,
        },
    )


def _policies() -> list[Policy]:
    return [
        Policy(
            "activity",
            [
                # Batch-safe (worker/drain/batch.py): they read nothing and only stage their one HINCRBY.
                define_source_handler(
                    "bot.message.merged", "bot.message.merged:activity", _on_user_message, batch_safe=True
                ),
                define_source_handler(
                    ("tool.outcome.completed", "tool.outcome.failed"),
                    "source.tool-outcome.activity",
                    _on_tool_outcome,
                    batch_safe=True,
                ),
                define_signal_handler(
                    ("signal.message.received", "signal.tool.outcome"),
                    "signal.activity-planner",
                    _plan_activity,
                    batch_safe=True,
                ),
                define_action_handler(
                    ACTIVITY_ACTION, "handler.activity.record", _record_activity, batch_safe=True
                ),
            ],
        )
    ]
