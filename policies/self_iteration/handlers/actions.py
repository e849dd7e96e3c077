"""The self-iteration action handlers (reference §3.5): user memory and skill management. Both hand the work
to an agent run and answer at once: "Memory write enqueued." / "Skill write enqueued.". The run request is
staged in the outbox (``ctx.outbox("agent-run", …)``, committed with the action's idempotency mark) and
handed to the ``AgentRunner`` by the outbox relay, at least once, keyed by its deterministic operation id;
a hand-over that fails is retried by the relay, not by the chain. Exact skip and failure texts and error codes are
LobeHub's.

Differences from LobeHub: the idempotency lane is the runtime's (a redelivered action replays the stored
result instead of answering "Action idempotency key already applied."), and the run's operation id is
derived from the idempotency key, so a retried dispatch asks for the same run. An event with no user (LobeHub
always has one) writes no memory and no skill: both actions skip ("Missing userId for … action."), so
anonymous events are never pooled under one shared user. Both check the feature gate in the worker ("Self
iteration is disabled."), so a user who turned it off after the event was admitted gets no write.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from pydantic import TypeAdapter, ValidationError

from policies.self_iteration.agent.runners import AGENT_RUN_OUTBOX, RunRequest, operation_id_for
from policies.self_iteration.deps import SelfIterationDeps
from policies.self_iteration.handlers.completion import consume_pending_synthesis
from worker.plugin import Action, ExecutorResult, HandlerContext, Id, applied, failed, skipped

__all__ = ["UNSAFE_MEMORY", "skill_management_handler", "user_memory_handler"]

_ID: TypeAdapter[str] = TypeAdapter(Id)  # the door's id rule (worker/core/ids.py)
MARKER_KEPT_MAX = 128  # the longest idempotency key kept as a run's marker sourceId (LobeHub's are ~40)

# LobeHub's JS regexes (/\bmaybe\b/i …): JS's \b and /i know only ASCII word characters and letters, so
# re.ASCII: "我maybe更喜欢" has a word boundary before "maybe" (Python's Unicode \b saw none: a defect audit).
UNSAFE_MEMORY = [
    re.compile(p, re.IGNORECASE | re.ASCII)
    for p in (
        r"\bprobably\b",
        r"\bmaybe\b",
        r"\bmedical\b",
        r"\bhealth\b",
        r"\brelationship\b",
        r"\bfinance\b",
    )
]


def _marker(action: Action, kind: str) -> dict[str, Any]:
    p = action.payload
    marker = {
        "kind": kind,
        "sourceId": _marker_source_id(str(p.get("idempotencyKey") or action.action_id), kind),
        "anchorMessageId": p.get("assistantMessageId"),
        "topicId": p.get("topicId"),
        "triggerMessageId": p.get("triggerMessageId") or p.get("messageId"),
        "agentId": p.get("agentId"),
    }
    return {k: v for k, v in marker.items() if v is not None}


def _operation_id(kind: str, marker: dict[str, Any], ctx: HandlerContext, user_id: str) -> str:
    """The run's operation id: its tenant's, its user's and its scope's, from the action's idempotency key
    (``ctx.idempotency_key``: the planner's key, else the action id after its event's source type), so a run of
    one ``sourceId`` in another scope or under another source type is another run, not a repeat a receiver drops."""
    key = ctx.idempotency_key or str(marker["sourceId"])
    return operation_id_for(kind, key, tenant=ctx.tenant, user_id=user_id, scope_key=ctx.scope_key)


def _marker_source_id(key: str, kind: str) -> str:
    """The run's ``marker.sourceId`` (every receipt id of the run starts with it, and the run's completion event
    must pass the id rule): the idempotency key, as LobeHub builds it, when that is an id; else a digest of it.
    A key joins the root event's source id and a message id, which the door takes as any string: a message id
    with a space, or two long ids together, made a completion the door refused, and the run's receipts were
    lost with only a worker log line (a contract audit). A key over :data:`MARKER_KEPT_MAX` characters is a
    digest too: a receipt id adds a tool call id and a kind to it, and one past the id rule could not be rolled
    back (a review)."""
    try:
        if len(key) <= MARKER_KEPT_MAX:
            return str(_ID.validate_python(key))
    except ValidationError:
        pass
    return f"{kind}:sha256:{hashlib.sha256(key.encode()).hexdigest()[:40]}"


def _user_id(action: Action, ctx: HandlerContext) -> str | None:
    """The run's user: the event's (the one its credential stamped); the action's payload only when the event
    names none; None when neither does (the action then skips: nobody owns what it would write)."""
    user = (ctx.source.user_id if ctx.source is not None else None) or action.payload.get("userId")
    return str(user) if user else None


def _origin(ctx: HandlerContext) -> str | None:
    """The event whose chain asks for the run (its erasure drops the run: policies/self_iteration/origin.py)."""
    return ctx.source.event_id if ctx.source is not None else None


def user_memory_handler(action: Action, ctx: HandlerContext) -> ExecutorResult:
    if action.action_type != "action.user-memory.handle":
        return skipped(action, ctx, "Unsupported memory action.")
    user_id = _user_id(action, ctx)
    if user_id is None:
        return skipped(action, ctx, "Missing userId for memory action.")
    if not ctx.deps(SelfIterationDeps).enabled(user_id, ctx.keys):
        return skipped(action, ctx, "Self iteration is disabled.")
    message = str(action.payload.get("message") or "").strip()
    if not message:
        return skipped(action, ctx, "Missing memory action message.")
    marker = _marker(action, "memory")
    if any(p.search(message) for p in UNSAFE_MEMORY):
        return failed(
            action, ctx, "USER_MEMORY_EXECUTION_FAILED", "Memory candidate is not safe for automatic write"
        )
    agent_id = action.payload.get("agentId")
    if not agent_id:
        return skipped(action, ctx, "Missing agentId for memory action.")
    request = RunRequest(
        operation_id=_operation_id("memory", marker, ctx, user_id),
        slug="memory-writer",
        marker=marker,
        user_id=user_id,
        agent_id=str(agent_id),
        prompt=message,
        topic_id=action.payload.get("topicId"),
        scope_key=ctx.scope_key,
        origin_event_id=_origin(ctx),
        context={
            "message": message,
            "feedbackHint": action.payload.get("feedbackHint"),
            "reason": action.payload.get("reason"),
        },
    )
    ctx.outbox(AGENT_RUN_OUTBOX, request.to_json_dict(), key=request.operation_id)
    return applied(action, ctx, "Memory write enqueued.", output={"operationId": request.operation_id})


def skill_management_handler(action: Action, ctx: HandlerContext) -> ExecutorResult:
    if action.action_type != "action.skill-management.handle":
        return skipped(action, ctx, "Unsupported skill-management action.")
    user_id = _user_id(action, ctx)
    if user_id is None:
        return skipped(action, ctx, "Missing userId for skill-management action.")
    if not ctx.deps(SelfIterationDeps).enabled(user_id, ctx.keys):
        return skipped(action, ctx, "Self iteration is disabled.")
    message = str(action.payload.get("message") or "").strip()
    if not message:
        return skipped(action, ctx, "Missing skill-management action message.")
    agent_id = action.payload.get("agentId")
    if not agent_id:
        return skipped(action, ctx, "Missing agentId for skill-management action.")
    marker = _marker(action, "skill")
    p = action.payload
    prompt = "\n".join(
        [
            f"Agent id: {agent_id}",
            f"User id: {user_id}",
            f"Source id: {marker['sourceId']}",
            f"Feedback: {message}",
            f"Routing reason: {p.get('reason', '')}",
            f"Turn context: {p.get('serializedContext', '')}",
            f"Evidence: {p.get('evidence', [])}",
        ]
    )
    request = RunRequest(
        operation_id=_operation_id("skill", marker, ctx, user_id),
        slug="skill-management",
        marker=marker,
        user_id=user_id,
        agent_id=str(agent_id),
        prompt=prompt,
        topic_id=p.get("topicId"),
        scope_key=ctx.scope_key,
        origin_event_id=_origin(ctx),
        context={"message": message, "skillActionIntent": p.get("skillActionIntent")},
    )
    ctx.outbox(AGENT_RUN_OUTBOX, request.to_json_dict(), key=request.operation_id)
    if isinstance(p.get("pendingSynthesisOf"), str):
        consume_pending_synthesis(ctx, p["pendingSynthesisOf"], user_id)
    return applied(action, ctx, "Skill write enqueued.", output={"operationId": request.operation_id})
