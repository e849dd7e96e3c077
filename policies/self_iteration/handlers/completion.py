"""``agent.execution.completed`` (reference §1.4, §3.6, §7.1): the completion fan-out turns a finished
self-iteration run into receipts (one ``action.receipt.append`` per receipt: append-once, so a replayed
completion adds none), and deferred skill synthesis consumes a parked skill candidate once.

Our events keep the completion payload whole (LobeHub's renderer drops anchorMessageId, assistantMessageId,
reason and triggerMessageId: quirk 1), so synthesis sees the anchor it needs. A parked candidate is
consumed by the skill-management action when it applies (``consume_pending_synthesis``), never before, and
only by its own user: the candidate records the ``userId`` of the feedback that parked it, and a completion
of another user (or of none) leaves it parked and records a diagnostic (``stage: skill-synthesis``). A
completion with no user writes no receipt (the chain concludes ``no userId: receipts need a user``).
"""

from __future__ import annotations

import json
from typing import Any

from policies.dmail import RECEIPT_ACTION
from policies.self_iteration.deps import SelfIterationDeps
from policies.self_iteration.keys import SelfIterationKeys, skill_intent_field, skill_intent_field_of_before
from policies.self_iteration.records.receipts import build_self_iteration_receipts
from worker.plugin import (
    Action,
    ChainRef,
    Conclude,
    Dispatch,
    HandlerContext,
    SignalRef,
    Source,
    action_from,
    now_ms,
    signal_from,
)

__all__ = ["completion_fanout", "consume_pending_synthesis", "skill_synthesis"]

WAITING_REASONS = ("waiting_for_async_tool", "waiting_for_human")


def completion_fanout(source: Source, ctx: HandlerContext) -> Dispatch | Conclude | None:
    """``agent.execution.completed:completion-fanout``: needs agentId, operationId, selfIteration and a user. The
    operation id is LobeHub's renderer's ``String(payload.operationId ?? sourceId)``: only a missing (or null) one
    falls back to the source id; an empty one still skips (LobeHub's ``!operationId``)."""
    p = source.payload
    self_iteration = p.get("selfIteration")
    agent_id = p.get("agentId") or source.agent_id
    operation_id = p.get("operationId")
    if operation_id is None:
        operation_id = source.source_id
    if not agent_id or not operation_id or not isinstance(self_iteration, dict):
        return None
    if not source.user_id:  # a receipt is one user's: never pool anonymous runs under a shared user id
        return Conclude(concluded={"reason": "no userId: receipts need a user"})
    marker = self_iteration.get("marker") or {}
    source_id = str(marker.get("sourceId") or operation_id)
    topic_id = str(p.get("topicId") or marker.get("topicId") or source_id)
    receipts = build_self_iteration_receipts(
        agent_id=str(agent_id),
        artifacts=list(self_iteration.get("artifacts") or []),
        created_at=ctx.now(),
        marker=marker,
        mutations=list(self_iteration.get("mutations") or []),
        operation_id=str(operation_id),
        source_id=source_id,
        source_type="agent.execution.completed",
        topic_id=topic_id,
        # The event's user (the door made selfIteration.userId agree with it), never the payload's own.
        user_id=source.user_id,
    )
    receipts = _first_of_each_id(receipts)
    if not receipts:
        return None
    signal = signal_from(
        source,
        "self-iteration-completed",
        "signal.self-iteration.completed",
        {"receiptIds": [r["id"] for r in receipts]},
        ctx.now(),
    )
    actions = [
        action_from(
            signal,
            f"receipt:{i}",
            RECEIPT_ACTION,
            {"receipt": r, "idempotencyKey": f"receipt:{r['userId']}:{r['id']}"},
            ctx.now(),
        )
        for i, r in enumerate(receipts)
    ]
    return Dispatch(signals=[signal], actions=actions)


def _first_of_each_id(receipts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One receipt per id, the first: a receipt is appended once per id (``<sourceId>:<toolCallId>:<kind>``), so
    a second one under it (a tool call retried, skipped then applied) was never stored; as two actions under one
    idempotency key with different payloads it would now end the whole completion ``INVALID_RESULT``."""
    first: dict[str, dict[str, Any]] = {}
    for receipt in receipts:
        first.setdefault(str(receipt["id"]), receipt)
    return list(first.values())


def skill_synthesis(source: Source, ctx: HandlerContext) -> Dispatch | None:
    """``agent.execution.completed:skill-synthesis``: a parked candidate becomes one skill-management action."""
    p = source.payload
    if p.get("selfIteration") or p.get("reason") in WAITING_REASONS:
        return None
    deps = ctx.deps(SelfIterationDeps)
    if not source.user_id or not deps.enabled(source.user_id, ctx.keys):
        return None  # a parked candidate is one user's: a completion with no user consumes none
    assistant = p.get("assistantMessageId") or p.get("anchorMessageId")
    user_message = p.get("triggerMessageId")
    if not assistant or not user_message or not p.get("topicId"):
        return None
    field, record = _parked(ctx, str(user_message), source.user_id)
    if not record or not record.get("pendingSynthesis"):
        return None
    if record.get("userId") != source.user_id:
        _foreign_candidate(ctx, source, field)
        return None
    pending = record["pendingSynthesis"]
    # Consumed once, and only by success: the skill-management action clears pendingSynthesis in the same
    # fenced script that marks its idempotency lane (LobeHub consumes after success too). A failed action
    # leaves the candidate parked; a retried chain rebuilds the same deterministic action.
    action_id = f"{assistant}:completion:{user_message}:skill-management"
    signal_ref = SignalRef(
        signal_id=f"{user_message}:skill-synthesis", signal_type="signal.feedback.domain.skill"
    )
    payload: dict[str, Any] = {
        "agentId": pending.get("agentId") or p.get("agentId"),
        "assistantMessageId": assistant,
        "evidence": [
            *(pending.get("evidence") or []),
            {"cue": "completion_trajectory", "excerpt": f"Completed turn {assistant}"},
        ],
        "idempotencyKey": f"{user_message}:skill:{user_message}",
        "message": pending.get("message", ""),
        "messageId": user_message,
        "topicId": p.get("topicId"),
        "triggerMessageId": user_message,
        "pendingSynthesisOf": user_message,
    }
    action = Action(
        action_id=action_id,
        action_type="action.skill-management.handle",
        signal=signal_ref,
        source=source.ref,
        chain=ChainRef(
            chain_id=source.chain.chain_id, root_source_id=user_message, parent_node_id=signal_ref.signal_id
        ),
        timestamp=ctx.now(),
        payload={k: v for k, v in payload.items() if v is not None},
    )
    return Dispatch(actions=[action])


def _foreign_candidate(ctx: HandlerContext, source: Source, field: str) -> None:
    """A completion names a candidate another user parked (or one parked before candidates named their user):
    not consumed; kept for operators with the judges' diagnostics (newest first, 1,000 at most)."""
    entry = {
        "stage": "skill-synthesis",
        "sourceId": source.source_id,
        "scopeKey": ctx.scope_key,
        "userId": source.user_id,
        "error": f"{field} was parked by another user: not consumed",
        "at": now_ms(),
    }
    diagnostics = SelfIterationKeys(ctx.keys).diagnostics
    ctx.effects.call("LPUSH", diagnostics, json.dumps(entry, ensure_ascii=False))
    ctx.effects.call("LTRIM", diagnostics, 0, 999)


def _parked(ctx: HandlerContext, user_message: str, user_id: str) -> tuple[str, dict[str, Any] | None]:
    """``user_id``'s candidate parked for ``user_message`` (its field, and the record or None): under the user's
    field, else under the field of before fields were one user's (which may hold another user's)."""
    key = SelfIterationKeys(ctx.keys).skill_intents(ctx.scope_key)
    fields = [skill_intent_field(user_message, user_id), skill_intent_field_of_before(user_message)]
    for field, raw in zip(fields, ctx.deps(SelfIterationDeps).redis.hmget(key, fields), strict=True):
        if raw:
            return field, json.loads(raw)
    return fields[0], None


def consume_pending_synthesis(ctx: HandlerContext, user_message: str, user_id: str) -> None:
    """Stage the removal of ``user_id``'s parked candidate's ``pendingSynthesis`` (applied with the action's
    lane); another user's candidate stays."""
    field, record = _parked(ctx, user_message, user_id)
    if not record or "pendingSynthesis" not in record or record.get("userId") != user_id:
        return
    record.pop("pendingSynthesis")
    key = SelfIterationKeys(ctx.keys).skill_intents(ctx.scope_key)
    ctx.effects.call("HSET", key, field, json.dumps(record, ensure_ascii=False))
