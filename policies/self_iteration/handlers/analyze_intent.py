"""LobeHub's analyzeIntent policy (reference §3.3-3.4): satisfaction judge → domain judge (with skill-intent
enrichment) → feedback action planner. Deterministic ids as §2.5.

Planner decision table, in order, for each ``signal.feedback.domain.*``:
1. memory → ``action.user-memory.handle`` (idempotency ``<rootSourceId>:memory:<messageId>``);
2. prompt → nothing (LobeHub's TODO);
3. a direct skill decision (route direct_decision, or not satisfied and route not non_skill): on
   ``client.runtime.start`` the intent is recorded and the chain concludes; on a server-inbound trigger the
   candidate is parked until ``agent.execution.completed`` (conclude); else ``action.skill-management.handle``;
4. an accumulating skill (satisfied, weak): the observation record
   ``procedure-record:<signalId>:skill-observation-record`` joins the scope's bucket (score 0.6 each, the
   last 20 kept); at 2 records and score >= 1 ``signal.procedure.bucket.scored`` is dispatched
   (suggestedActions ``maintain``, as LobeHub's batch scorer) with an ``accumulated`` marker, and no action,
   and the bucket is emptied: each observation is scored once;
5. none / non_skill → nothing.
Before all of these, step 0 (LobeHub's step 1): an active ``handled`` marker written by the tool-outcome
procedure for this message suppresses the action (``signal.procedure.bucket.scored``, suggestedActions
``suppressed``). Hinted skill documents need LobeHub's agent-document receipts and are left out.

The satisfaction judge checks the feature gate first (the event may have waited in a paused scope while its
user turned self-iteration off): disabled → the chain concludes ``gate_disabled``, no judge is asked.
A skill-intent record names the ``userId`` of its feedback, so only that user's completion consumes it.
"""

from __future__ import annotations

import json
from typing import Any

from policies.self_iteration.deps import SelfIterationDeps
from policies.self_iteration.handlers.procedure import should_suppress
from policies.self_iteration.judges.rules import DomainTarget, SatisfactionVerdict
from policies.self_iteration.keys import SelfIterationKeys, skill_intent_field
from policies.self_iteration.records.procedures import PROCEDURE_TTL_S, stage_procedure_record
from worker.plugin import Conclude, Dispatch, HandlerContext, Signal, Source, action_from, now_ms, signal_from

__all__ = ["CONFLICT_POLICIES", "domain_judge", "feedback_planner", "satisfaction_judge"]

CONFLICT_POLICIES: dict[str, dict[str, Any]] = {
    "memory": {"forbiddenWith": ["none"], "mode": "fanout", "priority": 100},
    "none": {"forbiddenWith": ["memory", "prompt", "skill"], "mode": "exclusive", "priority": 0},
    "prompt": {"forbiddenWith": ["memory", "none", "skill"], "mode": "exclusive", "priority": 90},
    "skill": {"forbiddenWith": ["none"], "mode": "fanout", "priority": 80},
}
SKILL_CANDIDATE_DELTA = 0.6
SKILL_BUCKET_MIN_RECORDS = 2
SKILL_BUCKET_THRESHOLD = 1.0
SKILL_BUCKET_MAX_ITEMS = 20  # a bucket is emptied once scored; the cap bounds one that never scores
CLIENT_TRIGGERS = ("client.runtime.start", "client.runtime.complete", "agent_signal")


def _diagnostic(ctx: HandlerContext, stage: str, source_id: str, exc: Exception) -> None:
    """ClassifierDiagnosticsService.recordMalformedOutput: kept (newest first, 1,000 at most) for operators."""
    entry = {
        "stage": stage,
        "sourceId": source_id,
        "scopeKey": ctx.scope_key,
        "userId": ctx.source.user_id if ctx.source is not None else None,  # erasure matches it exactly
        "error": str(exc)[:480],
        "at": now_ms(),
    }
    ctx.effects.call("LPUSH", SelfIterationKeys(ctx.keys).diagnostics, json.dumps(entry, ensure_ascii=False))
    ctx.effects.call("LTRIM", SelfIterationKeys(ctx.keys).diagnostics, 0, 999)


def _user_message_id(source: Source) -> str:
    """The feedback's message id, as LobeHub's ``agent.user.message`` renderer reads it: ``messageId`` →
    ``userMessageId`` → the source id (a hydrated completion's ``<assistant>:completion:<user>`` carries the user
    message as ``userMessageId``). An empty or non-string id is absent. policies/conversation_log.py reads the same."""
    p = source.payload
    for key in ("messageId", "userMessageId"):
        value = p.get(key)
        if isinstance(value, str) and value:
            return value
    return source.source_id


def satisfaction_judge(source: Source, ctx: HandlerContext) -> Dispatch | Conclude | None:
    """``agent.user.message:feedback-satisfaction-judge`` → ``signal.feedback.satisfaction``."""
    p = source.payload
    if p.get("trigger") == "agent_signal":
        return Conclude(
            concluded={"reason": "suppressed: message from an Agent Signal run"}
        )  # recursion guard
    message = str(p.get("message") or p.get("prompt") or "").strip()
    if not message:
        return Conclude(concluded={"reason": "unsupported satisfaction classifier source"})
    deps = ctx.deps(SelfIterationDeps)
    if not deps.enabled(source.user_id, ctx.keys):  # the gate, in the worker too (module docstring)
        return Conclude(concluded={"status": "skipped", "reason": "gate_disabled"})
    judge = deps.satisfaction_judge
    try:
        verdict: SatisfactionVerdict = judge.judge(message, p.get("serializedContext"))
    except ValueError as exc:  # a malformed model answer: diagnostics, then conclude (as LobeHub)
        _diagnostic(ctx, "satisfaction", source.source_id, exc)
        return Conclude(concluded={"reason": "malformed satisfaction classifier output", "error": str(exc)})
    payload: dict[str, Any] = {
        "confidence": verdict.confidence,
        "evidence": verdict.evidence,
        "message": message,
        "messageId": _user_message_id(source),
        "reason": verdict.reason,
        "result": verdict.result,
        "sourceHints": {k: p[k] for k in ("documentPayload", "intents", "memoryPayload") if k in p},
    }
    for key in ("agentId", "anchorMessageId", "serializedContext", "topicId", "trigger", "triggerMessageId"):
        if p.get(key) is not None:
            payload[key] = p[key]
    signal = signal_from(source, "feedback-satisfaction", "signal.feedback.satisfaction", payload, ctx.now())
    return Dispatch(signals=[signal])


def domain_judge(signal: Signal, ctx: HandlerContext) -> Dispatch | Conclude | None:
    """``signal.feedback-domain-judge``: neutral → nothing; else 1-4 domain signals (skill enriched)."""
    p = signal.payload
    if p.get("result") == "neutral":
        return None
    deps = ctx.deps(SelfIterationDeps)
    judge, classifier = deps.domain_judge, deps.skill_intent
    verdict = SatisfactionVerdict(p["result"], p["confidence"], p["reason"], p.get("evidence", []))
    try:
        targets: list[DomainTarget] = judge.judge_domains(p["message"], verdict)
    except ValueError as exc:
        _diagnostic(ctx, "domain", signal.source.source_id, exc)
        return Conclude(concluded={"reason": "malformed domain classifier output", "error": str(exc)})
    best: dict[str, DomainTarget] = {}
    for t in targets:
        if t.target not in best or t.confidence > best[t.target].confidence:
            best[t.target] = t
    if not best:
        return Conclude(concluded={"reason": "no feedback domains classified"})
    if len(best) > 4:
        return Conclude(concluded={"reason": "signal fanout budget exceeded"})
    signals = []
    for target in best.values():
        payload: dict[str, Any] = {
            "confidence": target.confidence,
            "conflictPolicy": CONFLICT_POLICIES[target.target],
            "evidence": target.evidence or p.get("evidence", []),
            "message": p["message"],
            "messageId": p["messageId"],
            "reason": target.reason,
            "satisfactionResult": p["result"],
            "sourceHints": p.get("sourceHints"),
            "target": target.target,
            # Kept on domain signals too, so planned actions carry it (LobeHub drops it here: quirk 13).
            "serializedContext": p.get("serializedContext"),
        }
        for key in ("agentId", "anchorMessageId", "topicId", "trigger", "triggerMessageId"):
            if p.get(key) is not None:
                payload[key] = p[key]
        if target.target == "skill":
            payload.update(classifier.classify(p["message"], p.get("serializedContext")).to_payload())
        payload = {k: v for k, v in payload.items() if v is not None}
        signals.append(
            signal_from(
                signal,
                f"domain:{target.target}",
                f"signal.feedback.domain.{target.target}",
                payload,
                ctx.now(),
            )
        )
    return Dispatch(signals=signals)


def _action_payload(signal: Signal, kind: str) -> dict[str, Any]:
    p = signal.payload
    root = signal.chain.root_source_id
    message_id = p["messageId"]
    assistant = p.get("anchorMessageId")
    if assistant is None and ":completion:" in signal.source.source_id:
        assistant = signal.source.source_id.split(":completion:")[0]
    payload = {
        "agentId": p.get("agentId"),
        "assistantMessageId": assistant,
        "conflictPolicy": p.get("conflictPolicy"),
        "evidence": p.get("evidence"),
        "feedbackHint": "satisfied" if p.get("satisfactionResult") == "satisfied" else "not_satisfied",
        "idempotencyKey": f"{root}:{kind}:{message_id}",
        "message": p["message"],
        "messageId": message_id,
        "reason": p.get("reason"),
        "serializedContext": p.get("serializedContext"),
        "sourceHints": p.get("sourceHints"),
        "topicId": p.get("topicId"),
        "triggerMessageId": p.get("triggerMessageId") or message_id,
    }
    if kind == "skill":
        for key in ("skillActionIntent", "skillIntentConfidence", "skillIntentExplicitness", "skillRoute"):
            payload[key] = p.get(key)
    return {k: v for k, v in payload.items() if v is not None}


def _write_intent_record(ctx: HandlerContext, signal: Signal, pending: bool) -> None:
    p = signal.payload
    record: dict[str, Any] = {
        "actionIntent": p.get("skillActionIntent"),
        "confidence": p.get("skillIntentConfidence"),
        "createdAt": ctx.now(),
        "explicitness": p.get("skillIntentExplicitness"),
        "feedbackMessageId": p["messageId"],
        "reason": p.get("skillIntentReason"),
        "route": p.get("skillRoute"),
        "scopeKey": ctx.scope_key,
        "sourceId": signal.source.source_id,
    }
    if ctx.source is not None and ctx.source.user_id:
        record["userId"] = ctx.source.user_id  # only this user's completion consumes it (completion.py)
    if pending:
        record["pendingSynthesis"] = {
            k: v
            for k, v in {
                "agentId": p.get("agentId"),
                "conflictPolicy": p.get("conflictPolicy"),
                "evidence": p.get("evidence"),
                "message": p["message"],
                "sourceHints": p.get("sourceHints"),
                "topicId": p.get("topicId"),
            }.items()
            if v is not None
        }
    key = SelfIterationKeys(ctx.keys).skill_intents(ctx.scope_key)
    field = skill_intent_field(str(p["messageId"]), record.get("userId"))
    ctx.effects.call("HSET", key, field, json.dumps(record, ensure_ascii=False))
    ctx.effects.call("EXPIRE", key, PROCEDURE_TTL_S)


def _observation_record(ctx: HandlerContext, signal: Signal) -> dict[str, Any]:
    """LobeHub's skill observation record (processors/procedure.ts ``accumulateSignal``): a scored candidate."""
    p = signal.payload
    return {
        "accumulatorRole": "candidate",
        "cheapScoreDelta": SKILL_CANDIDATE_DELTA,
        "createdAt": ctx.now(),
        "domainKey": "skill",
        "id": f"procedure-record:{signal.signal_id}:skill-observation-record",
        "intentClass": "implicit_positive",
        "refs": {"signalIds": [signal.signal_id], "sourceIds": [signal.source.source_id]},
        "scopeKey": ctx.scope_key,
        "status": "observed",
        "summary": p.get("reason") or p.get("message"),
        "userId": ctx.source.user_id if ctx.source is not None else None,  # whose feedback (erasure)
    }


def _accumulate(ctx: HandlerContext, signal: Signal) -> Dispatch | None:
    """Record the observation; at 2 records scoring >= 1 dispatch LobeHub's batch score (``maintain``)."""
    record = _observation_record(ctx, signal)
    stage_procedure_record(ctx, record)
    key = SelfIterationKeys(ctx.keys).skill_candidates(ctx.scope_key)
    item = json.dumps(
        {
            "recordId": record["id"],
            "score": SKILL_CANDIDATE_DELTA,
            "at": now_ms(),
            "userId": record["userId"],  # erasure drops the user's items of a shared scope
        }
    )
    cap = SKILL_BUCKET_MAX_ITEMS
    items = [json.loads(x) for x in ctx.deps(SelfIterationDeps).redis.lrange(key, -cap, -1)]
    if not any(i["recordId"] == record["id"] for i in items):
        ctx.effects.call("RPUSH", key, item)
        ctx.effects.call("LTRIM", key, -cap, -1)
        ctx.effects.call("EXPIRE", key, PROCEDURE_TTL_S)
        items = [*items, json.loads(item)][-cap:]
    score = sum(i["score"] for i in items)
    if len(items) < SKILL_BUCKET_MIN_RECORDS or score < SKILL_BUCKET_THRESHOLD:
        return None
    ctx.effects.call("DEL", key)  # scored: the next observations start a new bucket
    # LobeHub's batchScorer: each observed record suggests `maintain`, confidence 0.7 for a non-empty bucket.
    payload = {
        "aggregateScore": score,
        "bucketKey": f"{ctx.scope_key}:skill",
        "confidence": 0.7,
        "domain": "skill",
        "itemScores": [
            {
                "reasons": ["observed-record"],
                "recordId": i["recordId"],
                "score": i["score"],
                "suggestedAction": "maintain",
            }
            for i in items
        ],
        "recordIds": [i["recordId"] for i in items],
        "suggestedActions": ["maintain"],
    }
    scored = signal_from(
        signal, "signal:procedure-accumulated", "signal.procedure.bucket.scored", payload, ctx.now()
    )
    _mark_accumulated(ctx, signal, scored.signal_id, record["id"])
    return Dispatch(signals=[scored])


def _mark_accumulated(ctx: HandlerContext, signal: Signal, scored_id: str, record_id: str) -> None:
    """LobeHub's ``accumulated`` marker (never suppresses: only ``handled`` markers do)."""
    proc = f"message:{signal.payload['messageId']}"
    marker = {
        "markerType": "accumulated",
        "domainKey": "skill",
        "intentClass": "implicit_positive",
        "procedureKey": proc,
        "recordId": record_id,
        "signalId": scored_id,
        "sourceId": signal.source.source_id,
        "expiresAt": now_ms() + PROCEDURE_TTL_S * 1000,
    }
    user = ctx.source.user_id if ctx.source is not None else None
    key = SelfIterationKeys(ctx.keys).procedure_marker(
        ctx.scope_key, "skill", "implicit_positive", proc, user
    )
    ctx.effects.call("SET", key, json.dumps(marker), "EX", PROCEDURE_TTL_S)


def _suppressed(signal: Signal, ctx: HandlerContext) -> Dispatch | None:
    """Step 1: a tool already handled this message's intent (an active ``handled`` marker) → no action."""
    p = signal.payload
    target = str(p.get("target"))
    domain_key = {"memory": "memory:user-preference", "skill": "skill"}.get(target, target)
    primary = "implicit_positive" if p.get("satisfactionResult") == "satisfied" else "unknown"
    candidates = {
        "memory": [primary, "explicit_persistence", "unknown"],
        "skill": [primary, "tool_command", "explicit_persistence", "unknown"],
    }.get(target, [primary, "unknown"])
    if not should_suppress(
        ctx, domain_key=domain_key, candidates=candidates, proc=f"message:{p.get('messageId')}"
    ):
        return None
    payload = {
        "aggregateScore": 0,
        "bucketKey": f"{ctx.scope_key}:{target}",
        "confidence": 1,
        "domain": target,
        "itemScores": [],
        "recordIds": [],
        "suggestedActions": ["suppressed"],
    }
    return Dispatch(
        signals=[
            signal_from(
                signal, "signal:procedure-suppressed", "signal.procedure.bucket.scored", payload, ctx.now()
            )
        ]
    )


def feedback_planner(signal: Signal, ctx: HandlerContext) -> Dispatch | Conclude | None:
    """``signal.feedback-action-planner`` (module docstring: the decision table)."""
    p = signal.payload
    target = p.get("target")
    suppressed = _suppressed(signal, ctx)
    if suppressed is not None:
        return suppressed
    if target == "memory":
        action = action_from(
            signal, "memory", "action.user-memory.handle", _action_payload(signal, "memory"), ctx.now()
        )
        return Dispatch(actions=[action])
    if target != "skill":
        return None  # prompt (no action yet) and none
    route = p.get("skillRoute")
    direct = route == "direct_decision" or (
        p.get("satisfactionResult") != "satisfied" and route != "non_skill"
    )
    trigger = p.get("trigger")
    if direct:
        if trigger == "client.runtime.start":
            _write_intent_record(ctx, signal, pending=False)
            return Conclude(concluded={"reason": "skill intent recorded until client.runtime.complete"})
        if trigger and trigger not in CLIENT_TRIGGERS:
            _write_intent_record(ctx, signal, pending=True)
            return Conclude(concluded={"reason": "skill candidate parked until agent.execution.completed"})
        action = action_from(
            signal,
            "skill-management",
            "action.skill-management.handle",
            _action_payload(signal, "skill"),
            ctx.now(),
        )
        return Dispatch(actions=[action])
    if route == "non_skill":
        return None
    return _accumulate(ctx, signal)
