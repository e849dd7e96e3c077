"""The tool-outcome procedure (reference §3.7) and the planner's suppression markers.

``source.tool-outcome.procedure`` (tool.outcome.completed | failed; needs ``payload.domainKey`` and
``outcome.status``): writes the procedure record (``procedure-record:<sourceId>``, role ``context``), keeps
the scope's last 8 procedure receipts, writes a ``handled`` marker when the outcome may suppress later
feedback (``memory:*`` needs intent ``explicit_persistence``; ``skill:*`` needs ``tool_command`` or
``explicit_persistence``; status succeeded or skipped), feeds the self-reflection accumulator, and
dispatches ``signal.tool.procedure``. When an accumulator threshold is crossed (each reason once per scope),
``agent.self_reflection.requested`` is enqueued.

A marker is keyed by (scope, domainKey, intentClass, procedureKey) with procedureKey
``message:<id>`` → ``operation:<id>`` → ``tool-call:<id>`` → ``root-source:<id>``; active while unexpired.
(LobeHub double-prefixes the marker key: quirk 10; ours is one key, ``procedure-marker:…``.)
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from policies.self_iteration.deps import SelfIterationDeps
from policies.self_iteration.keys import SelfIterationKeys
from policies.self_iteration.records.procedures import PROCEDURE_TTL_S, stage_procedure_record
from worker.plugin import Dispatch, HandlerContext, Source, now_ms, signal_from

__all__ = ["REFLECTION_THRESHOLDS", "procedure_key", "should_suppress", "tool_outcome_procedure"]

MAX_SOURCE_ID = 256  # the id rule of the door (worker/core/ids.py): a follow-up must pass it too

MAX_PROCEDURE_RECEIPTS = 8
REFLECTION_THRESHOLDS = {
    "correctionCount": 2,
    "failedToolCount": 2,
    "receiptCount": 3,
    "runtimeStepCount": 6,
    "sameToolFailureCount": 2,
    "toolCallCount": 10,
}


def procedure_key(payload: dict[str, Any], source_id: str) -> str:
    for field, prefix in (
        ("messageId", "message"),
        ("operationId", "operation"),
        ("toolCallId", "tool-call"),
    ):
        value = payload.get(field)
        if isinstance(value, str) and value:
            return f"{prefix}:{value}"
    return f"root-source:{source_id}"


def should_suppress(ctx: HandlerContext, *, domain_key: str, candidates: list[str], proc: str) -> bool:
    """An active ``handled`` marker of the event's user for any candidate intent class suppresses the planned
    action; so does one of an event of no user (a tool outcome an ingest key sent for nobody in particular, as
    before markers were one user's) and one of before markers were (for the 7 days it lives)."""
    k = SelfIterationKeys(ctx.keys)
    user = ctx.source.user_id if ctx.source is not None else None
    owners = [user, None] if user else [None]
    keys = [k.procedure_marker(ctx.scope_key, domain_key, i, proc, u) for u in owners for i in candidates] + [
        k.procedure_marker_of_before(ctx.scope_key, domain_key, i, proc) for i in candidates
    ]
    markers = ctx.deps(SelfIterationDeps).redis.mget(keys)
    return any(raw and json.loads(raw).get("markerType") == "handled" for raw in markers)


def _may_mark(domain_key: str, intent: str, status: str) -> bool:
    if status not in ("succeeded", "skipped"):
        return False
    if domain_key.startswith("memory:"):
        return intent == "explicit_persistence"
    if domain_key.startswith("skill:") or domain_key == "skill":
        return intent in ("tool_command", "explicit_persistence")
    return False


def _reflection_scope(p: dict[str, Any], scope_key: str) -> tuple[str, str]:
    for field, kind in (("taskId", "task"), ("operationId", "operation"), ("topicId", "topic")):
        if isinstance(p.get(field), str) and p[field]:
            return kind, p[field]
    return "topic", scope_key


def tool_outcome_procedure(source: Source, ctx: HandlerContext) -> Dispatch | None:
    """Stage the procedure record, receipt and marker; feed the accumulator; dispatch ``signal.tool.procedure``.
    Every write is staged: a tool outcome that is retried or goes dead leaves no procedure state."""
    p = source.payload
    raw_outcome = p.get("outcome")
    outcome: dict[str, Any] = raw_outcome if isinstance(raw_outcome, dict) else {}
    domain_key, status = p.get("domainKey"), outcome.get("status")
    if not isinstance(domain_key, str) or not isinstance(status, str):
        return None
    intent = str(p.get("intentClass") or "unknown")
    raw_tool = p.get("tool")
    tool: dict[str, Any] = raw_tool if isinstance(raw_tool, dict) else {}
    record = {
        "id": f"procedure-record:{source.source_id}",
        "accumulatorRole": "context",
        "cheapScoreDelta": 0,
        "domainKey": domain_key,
        "intentClass": intent,
        "status": "failed" if status == "failed" else "handled",
        "tool": tool,
        "createdAt": ctx.now(),
        "userId": source.user_id,  # whose outcome: erasure drops the user's records of a shared scope
    }
    _stage_record(ctx, record, p, source.source_id, status)
    _accumulate(ctx, source, record, tool)
    payload = {
        "domainKey": domain_key,
        "intentClass": intent,
        "status": status,
        "recordId": record["id"],
        "tool": tool,
    }
    return Dispatch(
        signals=[signal_from(source, "tool-procedure", "signal.tool.procedure", payload, ctx.now())]
    )


def _stage_record(
    ctx: HandlerContext, record: dict[str, Any], p: dict[str, Any], source_id: str, status: str
) -> None:
    """The procedure record, the scope's last procedure receipts and (when allowed) the handled marker."""
    stage_procedure_record(ctx, record)
    receipts_key = SelfIterationKeys(ctx.keys).procedure_receipts(ctx.scope_key)
    receipt = {
        "id": f"procedure-receipt:{record['id']}",
        "recordId": record["id"],
        "status": record["status"],
    }
    ctx.effects.call("LPUSH", receipts_key, json.dumps(receipt))
    ctx.effects.call("LTRIM", receipts_key, 0, MAX_PROCEDURE_RECEIPTS - 1)
    ctx.effects.call("EXPIRE", receipts_key, PROCEDURE_TTL_S)
    domain_key, intent = record["domainKey"], record["intentClass"]
    if not _may_mark(domain_key, intent, status):
        return
    proc = procedure_key(p, source_id)
    marker = {
        "markerType": "handled",
        "domainKey": domain_key,
        "intentClass": intent,
        "procedureKey": proc,
        "expiresAt": now_ms() + PROCEDURE_TTL_S * 1000,
    }
    user = ctx.source.user_id if ctx.source is not None else None
    key = SelfIterationKeys(ctx.keys).procedure_marker(ctx.scope_key, domain_key, intent, proc, user)
    ctx.effects.call("SET", key, json.dumps(marker), "EX", PROCEDURE_TTL_S)


def _counted_fields(record: dict[str, Any], tool: dict[str, Any]) -> dict[str, str]:
    """reason → accumulator hash field, for the reasons this outcome counts towards."""
    fields = {"toolCallCount": "toolCallCount", "receiptCount": "receiptCount"}
    if record["status"] == "failed":
        fields["failedToolCount"] = "failedToolCount"
        fields["sameToolFailureCount"] = f"failures:{tool.get('identifier', '?')}:{tool.get('apiName', '?')}"
    return fields


def _accumulate(ctx: HandlerContext, source: Source, record: dict[str, Any], tool: dict[str, Any]) -> None:
    """One read (the counters, the window start, which reasons were raised), then staged increments, and
    one ``agent.self_reflection.requested`` follow-up per reason that crosses its threshold now (the
    follow-up and its ``emitted`` flag commit together with this event, or neither)."""
    p = source.payload
    scope_type, scope_id = _reflection_scope(p, ctx.scope_key)
    acc_key = SelfIterationKeys(ctx.keys).reflection_accumulator(ctx.scope_key, scope_type, scope_id)
    fields = _counted_fields(record, tool)
    read = [*fields.values(), "windowStart", *(f"emitted:{reason}" for reason in fields)]
    values = ctx.deps(SelfIterationDeps).redis.hmget(acc_key, read)
    counts = {reason: int(v or 0) + 1 for reason, v in zip(fields, values, strict=False)}
    window_raw, emitted = values[len(fields)], values[len(fields) + 1 :]
    for field in fields.values():
        ctx.effects.call("HINCRBY", acc_key, field, 1)
    window_start = int(window_raw or source.timestamp)
    if window_raw is None:
        ctx.effects.call("HSET", acc_key, "windowStart", str(window_start))
    ctx.effects.call("EXPIRE", acc_key, PROCEDURE_TTL_S)
    user, agent = source.user_id or p.get("userId"), source.agent_id or p.get("agentId")
    if not user or not agent:
        return
    for (reason, value), raised in zip(counts.items(), emitted, strict=True):
        if value < REFLECTION_THRESHOLDS[reason] or raised:
            continue  # below threshold, or this reason was already raised for the scope
        event = _reflection_request(
            source, str(user), str(agent), reason, (scope_type, scope_id), window_start
        )
        if ctx.emit(event) == "staged":
            ctx.effects.call("HSET", acc_key, f"emitted:{reason}", "1")


def _reflection_request(
    source: Source, user: str, agent: str, reason: str, scope: tuple[str, str], window_start: int
) -> dict[str, Any]:
    scope_type, scope_id = scope
    window_end = source.timestamp
    source_id = f"self-reflection:{user}:{agent}:{scope_type}:{scope_id}:{reason}:{window_start}:{window_end}"
    if (
        len(source_id) > MAX_SOURCE_ID
    ):  # long user/agent/scope ids: LobeHub's shape no longer fits the id rule
        source_id = "self-reflection:sha256:" + hashlib.sha256(source_id.encode("utf-8")).hexdigest()
    return {
        "sourceType": "agent.self_reflection.requested",
        "sourceId": source_id,
        "userId": user,
        "agentId": agent,
        "payload": {
            "agentId": agent,
            "userId": user,
            "reason": reason,
            "scopeId": scope_id,
            "scopeType": scope_type,
            "topicId": source.payload.get("topicId"),
            "windowStart": window_start,
            "windowEnd": window_end,
        },
    }
