"""Session events from the agent tools (the session routes of producers/ record them): an applied D-Mail
(``agent.context.reverted``) leaves a receipt, "Context rewound to checkpoint N", anchored to the message that
sent the D-Mail. ``agent.dmail.sent``, ``agent.dmail.discarded`` and the signal tool's ``agent.signal.emitted``
have no handler: they are recorded for traces and metrics only. This plugin admits all four (``SOURCE_TYPES``)
and owns the agent tools' settings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from worker.plugin import (
    Action,
    Dispatch,
    ExecutorResult,
    HandlerContext,
    Plugin,
    PluginSettings,
    Policy,
    Signal,
    Source,
    action_from,
    applied,
    define_action_handler,
    define_signal_handler,
    define_source_handler,
    receipt_effects,
    signal_from,
)

__all__ = [
    "RECEIPT_ACTION",
    "SOURCE_TYPES",
    "AgentToolsSettings",
    "ContextRevertedPayload",
    "ReceiptDeps",
    "plugin",
    "receipt_action_handler",
]

RECEIPT_ACTION = "action.receipt.append"
SOURCE_TYPES = ("agent.context.reverted", "agent.dmail.sent", "agent.dmail.discarded", "agent.signal.emitted")


class ContextRevertedPayload(BaseModel):
    """An applied D-Mail: the receipt's title names the checkpoint and its detail is the message (the session
    route sends both, and the message id that sent the D-Mail when it knows one)."""

    model_config = ConfigDict(extra="allow", alias_generator=to_camel, populate_by_name=True)

    message: str
    checkpoint_id: Annotated[int, Field(ge=0, strict=True)]
    anchor_message_id: str | None = None


def _on_reverted(source: Source, ctx: HandlerContext) -> Dispatch:
    return Dispatch(
        signals=[
            signal_from(
                source, "context-reverted", "signal.context.reverted", dict(source.payload), ctx.now()
            )
        ]
    )


def _plan_receipt(signal: Signal, ctx: HandlerContext) -> Dispatch:
    p = signal.payload
    checkpoint = p.get("checkpointId")
    message = str(p.get("message") or "").strip()
    receipt: dict[str, Any] = {
        "id": f"{signal.source.source_id}:context-rewind",
        "kind": "context",
        "status": "applied",
        "title": f"Context rewound to checkpoint {checkpoint}",
        "detail": message if len(message) <= 280 else message[:277] + "...",
        "sourceId": signal.source.source_id,
        "sourceType": signal.source.source_type,
        "userId": p.get("userId"),
        "agentId": p.get("agentId"),
        "topicId": p.get("topicId"),
        "createdAt": ctx.now(),
        "metadata": {"sessionId": p.get("sessionId"), "checkpointId": checkpoint},
    }
    if p.get("anchorMessageId"):
        receipt["anchorMessageId"] = p["anchorMessageId"]
    receipt = {k: v for k, v in receipt.items() if v is not None}
    return Dispatch(actions=[action_from(signal, "receipt", RECEIPT_ACTION, {"receipt": receipt}, ctx.now())])


class AgentToolsSettings(PluginSettings):
    """The synchronous agent tools' options (read by the web app's session routes)."""

    functions_dir: str | None = None  # rolebox function definitions (*.md with YAML front matter)
    functions_workspace_dir: str | None = None  # where plan_incomplete() looks for .rolebox/plans/*.md


@dataclass(frozen=True, slots=True)
class ReceiptDeps:
    """How long a receipt is kept (``AGENT_SIGNAL_RECEIPT_RETENTION_S``)."""

    ttl_s: int


def receipt_action_handler(action: Action, ctx: HandlerContext) -> ExecutorResult:
    """Append the receipt in ``payload.receipt`` once (staged: commits with the idempotency mark)."""
    receipt = dict(action.payload["receipt"])
    source = ctx.source
    if source is not None and source.user_id:  # a receipt is its event's user's, whatever a payload says
        receipt["userId"] = source.user_id
    receipt.setdefault("userId", None)  # an event of no user, and a payload that names none: no user's
    event_id = source.event_id if source is not None else None
    # the indexes, count and announcement only when the SET NX writes: an id the user has already adds nothing
    ctx.effects.call_once(*receipt_effects(ctx.keys, receipt, ctx.deps(ReceiptDeps).ttl_s, event_id=event_id))
    return applied(
        action, ctx, detail=f"Receipt {receipt['id']} appended.", output={"receiptId": receipt["id"]}
    )


def plugin() -> Plugin:
    """D-Mail receipts (and the agent tools' settings)."""
    return Plugin(
        "dmail",
        policies=_policies(),
        settings=AgentToolsSettings,
        services=lambda runtime: ReceiptDeps(runtime.settings.receipt_retention_s),
        source_types=SOURCE_TYPES,
        payload_schemas={"agent.context.reverted": ContextRevertedPayload},
    )


def _policies() -> list[Policy]:
    return [
        Policy(
            "dmail-receipts",
            [
                define_source_handler(
                    "agent.context.reverted", "agent.context.reverted:receipt", _on_reverted
                ),
                define_signal_handler(
                    "signal.context.reverted", "signal.context-receipt-planner", _plan_receipt
                ),
                define_action_handler(RECEIPT_ACTION, "handler.receipt.append", receipt_action_handler),
            ],
        )
    ]
