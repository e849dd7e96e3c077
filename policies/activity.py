"""The activity plugin: per-scope activity bookkeeping, plus the tool-outcome payload check.

It exists so a fresh install does something visible end to end (``make run``): every merged bot message and
tool outcome becomes a signal, and each signal an idempotent action that counts activity per scope in
Redis (an effect staged in ``ctx.effects``, so a redelivered event never counts twice). A tool outcome
without ``tool.identifier`` or ``outcome.status`` can never be processed (LobeHub's tool-outcome procedure
needs both) and is dead-lettered with an error naming the field.
"""

from __future__ import annotations

from typing import Any

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

__all__ = ["ACTIVITY_ACTION", "plugin"]

ACTIVITY_ACTION = "action.activity.record"


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
    if not isinstance(outcome, dict) or outcome.get("status") not in ("succeeded", "skipped", "failed"):
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
    return Plugin("activity", policies=_policies())


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
