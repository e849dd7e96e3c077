"""Self-iteration sources (reference §3.3): nightly review, self-reflection and self-feedback intent. Each
handler runs gate → guard → collect → dispatch → conclude and always concludes with
``{status: dispatched | skipped | deduped, reason}``; our projection keeps the whole trace (LobeHub's is
empty for concluded chains: quirk 2).

The hand-over to the agent runner goes through the outbox: the run request and the review guard are staged
and commit with the event (or neither), and the relay delivers the request at least once, keyed by its
deterministic operation id (``operation_id_for``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from policies.self_iteration.agent.runners import AGENT_RUN_OUTBOX, RunRequest, operation_id_for
from policies.self_iteration.deps import SelfIterationDeps
from policies.self_iteration.keys import SelfIterationKeys
from worker.plugin import Conclude, HandlerContext, Source

__all__ = ["nightly_review", "self_feedback_intent", "self_reflection"]

GUARD_TTL_S = 3 * 24 * 60 * 60


def _missing(payload: dict[str, Any], fields: tuple[str, ...]) -> str | None:
    for name in fields:
        if payload.get(name) in (None, ""):
            return name
    return None


def _run(
    source: Source,
    ctx: HandlerContext,
    *,
    kind: str,
    required: tuple[str, ...],
    guard_key: Callable[[dict[str, Any]], str],
    marker_fields: tuple[str, ...],
    validate: Callable[[dict[str, Any]], str | None] | None = None,
) -> Conclude:
    p = source.payload
    missing = _missing(p, required)
    if missing is not None:
        return Conclude(concluded={"status": "skipped", "reason": "invalid_payload", "field": missing})
    problem = validate(p) if validate else None
    if problem:
        return Conclude(concluded={"status": "skipped", "reason": "invalid_payload", "detail": problem})
    key = guard_key(p)
    if kind == "nightly-review" and source.source_id != key:
        return Conclude(
            concluded={"status": "skipped", "reason": "invalid_payload", "detail": f"sourceId must be {key}"}
        )
    deps = ctx.deps(SelfIterationDeps)
    if not deps.enabled(str(p["userId"]), ctx.keys):
        return Conclude(concluded={"status": "skipped", "reason": "gate_disabled"})
    guard = SelfIterationKeys(ctx.keys).review_guard(f"{kind}-guard:{key}")
    if deps.redis.exists(guard):
        return Conclude(concluded={"status": "deduped", "reason": "guard_held", "guardKey": key})
    marker = {"kind": kind, "sourceId": source.source_id, "agentId": p["agentId"]}
    marker.update({f: p[f] for f in marker_fields if p.get(f) is not None})
    request = RunRequest(
        operation_id=operation_id_for(kind, source.source_id, tenant=ctx.tenant, user_id=str(p["userId"])),
        slug=kind,
        marker=marker,
        user_id=str(p["userId"]),
        agent_id=str(p["agentId"]),
        prompt=f"Mode: {'review' if kind == 'nightly-review' else 'reflection' if kind == 'self-reflection' else 'feedback'}\n"
        f"Source id: {source.source_id}",
        topic_id=p.get("topicId"),
        scope_key=ctx.scope_key,
        origin_event_id=source.event_id,
        context={"kind": kind},
    )
    # Both staged: the run request (the outbox relay hands it over) and the guard commit with the event.
    ctx.outbox(AGENT_RUN_OUTBOX, request.to_json_dict(), key=request.operation_id)
    ctx.effects.call("SET", guard, "1", "EX", GUARD_TTL_S)
    return Conclude(concluded={"status": "dispatched", "operationId": request.operation_id, "guardKey": key})


def nightly_review(source: Source, ctx: HandlerContext) -> Conclude:
    """``agent.nightly_review.requested:shared-review``; sourceId must be nightly-review:<u>:<a>:<localDate>."""
    return _run(
        source,
        ctx,
        kind="nightly-review",
        required=(
            "agentId",
            "localDate",
            "requestedAt",
            "reviewWindowEnd",
            "reviewWindowStart",
            "timezone",
            "userId",
        ),
        guard_key=lambda p: f"nightly-review:{p['userId']}:{p['agentId']}:{p['localDate']}",
        marker_fields=("localDate", "reviewWindowEnd", "reviewWindowStart"),
    )


def self_reflection(source: Source, ctx: HandlerContext) -> Conclude:
    """``agent.self_reflection.requested:shared-review``."""
    return _run(
        source,
        ctx,
        kind="self-reflection",
        required=("agentId", "reason", "scopeId", "scopeType", "userId", "windowEnd", "windowStart"),
        guard_key=lambda p: (
            f"self-reflection:{p['userId']}:{p['agentId']}:{p['scopeType']}:{p['scopeId']}:{p['reason']}:"
            f"{p['windowStart']}:{p['windowEnd']}"
        ),
        marker_fields=("topicId",),
        validate=lambda p: (
            None
            if p["scopeType"] in ("topic", "task", "operation")
            else "scopeType must be topic, task or operation"
        ),
    )


def _feedback_intent_problem(p: dict[str, Any]) -> str | None:
    if p["action"] not in ("write", "create", "refine", "consolidate", "proposal"):
        return "invalid_action"
    if p["kind"] not in ("memory", "skill", "gap"):
        return "invalid_kind"
    confidence = p["confidence"]
    if isinstance(confidence, bool) or not isinstance(confidence, int | float) or not 0 <= confidence <= 1:
        return "invalid_confidence"
    return None


def self_feedback_intent(source: Source, ctx: HandlerContext) -> Conclude:
    """``agent.self_feedback_intent.declared:shared-review``."""

    def guard(p: dict[str, Any]) -> str:
        scope_type, scope_id = (
            ("operation", p["operationId"]) if p.get("operationId") else ("topic", p.get("topicId", "-"))
        )
        return f"self-feedback-intent:{p['userId']}:{p['agentId']}:{scope_type}:{scope_id}:{p.get('toolCallId', '-')}"

    return _run(
        source,
        ctx,
        kind="self-feedback-intent",
        required=("action", "agentId", "confidence", "kind", "reason", "summary", "userId"),
        guard_key=guard,
        marker_fields=("topicId",),
        validate=_feedback_intent_problem,
    )
