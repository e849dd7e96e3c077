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

import json
import time
from typing import Any

from worker.context import HandlerContext
from worker.keys import Keys
from worker.nodes import Dispatch, Source, signal_from

__all__ = ["REFLECTION_THRESHOLDS", "procedure_key", "should_suppress", "tool_outcome_procedure"]

PROCEDURE_TTL_S = 7 * 24 * 60 * 60
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


def _marker_key(keys: Keys, scope: str, domain: str, intent: str, proc: str) -> str:
    return f"{keys.prefix}procedure-marker:{{{scope}}}:{domain}:{intent}:{proc}"


def should_suppress(ctx: HandlerContext, *, domain_key: str, candidates: list[str], proc: str) -> bool:
    """An active ``handled`` marker for any candidate intent class suppresses the planned action."""
    keys: Keys = ctx.services["keys"]
    redis = ctx.services["redis"]
    markers = redis.mget([_marker_key(keys, ctx.scope_key, domain_key, i, proc) for i in candidates])
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
    p = source.payload
    raw_outcome = p.get("outcome")
    outcome: dict[str, Any] = raw_outcome if isinstance(raw_outcome, dict) else {}
    domain_key, status = p.get("domainKey"), outcome.get("status")
    if not isinstance(domain_key, str) or not isinstance(status, str):
        return None
    keys: Keys = ctx.services["keys"]
    redis = ctx.services["redis"]
    intent = str(p.get("intentClass") or "unknown")
    raw_tool = p.get("tool")
    tool: dict[str, Any] = raw_tool if isinstance(raw_tool, dict) else {}
    record_id = f"procedure-record:{source.source_id}"
    record = {
        "id": record_id,
        "accumulatorRole": "context",
        "cheapScoreDelta": 0,
        "domainKey": domain_key,
        "intentClass": intent,
        "status": "failed" if status == "failed" else "handled",
        "tool": tool,
        "createdAt": ctx.now(),
    }
    proc_key = f"{keys.prefix}procedure:{{{ctx.scope_key}}}"
    acc_key = _accumulator_key(keys, ctx.scope_key, p)
    proc = procedure_key(p, source.source_id)
    # Round trip 1: the record, the marker, and whether this source was seen before (a redelivery must not
    # push a second receipt or count twice).
    pipe = redis.pipeline(transaction=False)
    pipe.hset(proc_key, record_id, json.dumps(record, ensure_ascii=False))
    pipe.expire(proc_key, PROCEDURE_TTL_S)
    pipe.hsetnx(acc_key, f"seen:{source.source_id}", "1")
    pipe.hsetnx(acc_key, "windowStart", str(source.timestamp))
    if _may_mark(domain_key, intent, status):
        marker = {
            "markerType": "handled",
            "domainKey": domain_key,
            "intentClass": intent,
            "procedureKey": proc,
            "expiresAt": int(time.time() * 1000) + PROCEDURE_TTL_S * 1000,
        }
        pipe.set(
            _marker_key(keys, ctx.scope_key, domain_key, intent, proc), json.dumps(marker), ex=PROCEDURE_TTL_S
        )
    first_time = bool(pipe.execute()[2])
    _accumulate(ctx, source, acc_key, first_time, record, tool)
    payload = {
        "domainKey": domain_key,
        "intentClass": intent,
        "status": status,
        "recordId": record_id,
        "tool": tool,
    }
    return Dispatch(
        signals=[signal_from(source, "tool-procedure", "signal.tool.procedure", payload, ctx.now())]
    )


def _accumulator_key(keys: Keys, scope_key: str, p: dict[str, Any]) -> str:
    scope_type, scope_id = _reflection_scope(p, scope_key)
    return f"{keys.prefix}self-reflection-accumulator:{{{scope_key}}}:{scope_type}:{scope_id}"


def _accumulate(
    ctx: HandlerContext,
    source: Source,
    acc_key: str,
    first_time: bool,
    record: dict[str, Any],
    tool: dict[str, Any],
) -> None:
    """Round trip 2: the procedure receipt (first time only), the counters (bumped the first time, read
    on a redelivery), the window start and which reasons were already raised; then one request per reason
    that crossed its threshold."""
    keys: Keys = ctx.services["keys"]
    redis = ctx.services["redis"]
    p = source.payload
    step = 1 if first_time else 0
    fields = {"toolCallCount": "toolCallCount", "receiptCount": "receiptCount"}  # reason → hash field
    if record["status"] == "failed":
        fields["failedToolCount"] = "failedToolCount"
        fields["sameToolFailureCount"] = f"failures:{tool.get('identifier', '?')}:{tool.get('apiName', '?')}"
    pipe = redis.pipeline(transaction=False)
    if first_time:
        receipts_key = f"{keys.prefix}procedure-receipts:{{{ctx.scope_key}}}"
        receipt = {
            "id": f"procedure-receipt:{record['id']}",
            "recordId": record["id"],
            "status": record["status"],
        }
        pipe.lpush(receipts_key, json.dumps(receipt))
        pipe.ltrim(receipts_key, 0, MAX_PROCEDURE_RECEIPTS - 1)
    for field in fields.values():
        pipe.hincrby(acc_key, field, step)
    pipe.expire(acc_key, PROCEDURE_TTL_S)
    pipe.hget(acc_key, "windowStart")
    pipe.hmget(acc_key, [f"emitted:{reason}" for reason in fields])
    replies = pipe.execute()
    *_, window_raw, emitted = replies
    values = replies[2 if first_time else 0 :][: len(fields)]
    counts = dict(zip(fields, (int(v) for v in values), strict=True))
    emit = ctx.services.get("emit")
    user, agent = source.user_id or p.get("userId"), source.agent_id or p.get("agentId")
    if emit is None or not user or not agent:
        return
    scope_type, scope_id = _reflection_scope(p, ctx.scope_key)
    window_start = int(window_raw or source.timestamp)
    for (reason, value), raised in zip(counts.items(), emitted, strict=True):
        if value < REFLECTION_THRESHOLDS[reason] or raised:
            continue  # below threshold, or this reason was already raised for the scope
        # Emit first, mark after: a crash in between re-emits on redelivery with the same sourceId,
        # which the door dedupes, so the request is neither lost nor doubled.
        window_end = source.timestamp
        event = {
            "sourceType": "agent.self_reflection.requested",
            "sourceId": f"self-reflection:{user}:{agent}:{scope_type}:{scope_id}:{reason}:{window_start}:{window_end}",
            "userId": user,
            "agentId": agent,
            "payload": {
                "agentId": agent,
                "userId": user,
                "reason": reason,
                "scopeId": scope_id,
                "scopeType": scope_type,
                "topicId": p.get("topicId"),
                "windowStart": window_start,
                "windowEnd": window_end,
            },
        }
        emit(event)
        redis.hset(acc_key, f"emitted:{reason}", "1")
