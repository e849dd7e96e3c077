"""The chain projection: LobeHub's trace envelope, telemetry record and trace events (reference §6.3, §6.4).

Pure functions of a finished chain. Differences from LobeHub, on purpose: ``durationMs`` is populated (the
chain-duration histogram is fed), ``traceId`` carries the OpenTelemetry trace id when there is one, and a
chain that ended in ``wait``/``schedule``/``conclude`` is projected whole (LobeHub projects an empty trace).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from worker.core.nodes import Action, ExecutorResult, Signal, Source

__all__ = [
    "MAX_ISO_MS",
    "MIN_ISO_MS",
    "envelope_metadata",
    "payload_ids",
    "project_chain",
    "signal_domain",
    "signal_outcome",
    "to_iso",
    "trace_events",
]


MIN_ISO_MS = -62_135_596_800_000  # 0001-01-01T00:00:00.000Z: the first instant a four-digit year names
MAX_ISO_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z: the last one (the door's bound on a timestamp)
_EPOCH = datetime(1970, 1, 1)  # naive UTC: isoformat then writes no offset


def to_iso(ms: int) -> str:
    """ISO 8601 in UTC with milliseconds, like JavaScript's ``toISOString``. Total: a time outside
    [:data:`MIN_ISO_MS`, :data:`MAX_ISO_MS`] (the door refuses one, a record stored before it did not) is
    written as the nearer of the two, never raised on."""
    clamped_ms = min(max(int(ms), MIN_ISO_MS), MAX_ISO_MS)
    return (_EPOCH + timedelta(milliseconds=clamped_ms)).isoformat(timespec="milliseconds") + "Z"


def signal_domain(signal_type: str) -> str:
    """``signal.feedback.domain.memory`` → ``feedback.domain``; two segments or fewer → the whole type."""
    parts = signal_type.split(".")
    return ".".join(parts[1:-1]) if len(parts) > 2 else signal_type


def signal_outcome(signal_type: str) -> str:
    return signal_type.split(".")[-1]


def _payload_str(source: Source, key: str) -> str | None:
    value = source.payload.get(key)
    return value if isinstance(value, str) else None


def _result_for(action: Action, results: Sequence[ExecutorResult]) -> ExecutorResult | None:
    return next((r for r in results if r.action_id == action.action_id), None)


def _edges(
    source: Source, signals: Sequence[Signal], actions: Sequence[Action], results: Sequence[ExecutorResult]
) -> list[dict[str, str]]:
    edges = [
        {"from": s.chain.parent_node_id or source.source_id, "relation": "produced", "to": s.signal_id}
        for s in signals
    ]
    edges += [
        {"from": a.chain.parent_node_id or a.signal.signal_id, "relation": "triggered", "to": a.action_id}
        for a in actions
    ]
    edges += [
        {"from": r.action_id, "relation": "resulted-in", "to": f"{r.action_id}:result"} for r in results
    ]
    return edges


def _handler_runs(actions: Sequence[Action], results: Sequence[ExecutorResult]) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = []
    for action in actions:
        result = _result_for(action, results)
        if result is None:
            continue
        run: dict[str, Any] = {
            "attempt": result.attempt.to_json_dict(),
            "handlerType": action.action_type,
            "id": f"{action.action_id}:attempt:{result.attempt.current}",
            "inputRefIds": [action.signal.signal_id],
            "outputRefIds": [f"{action.action_id}:result"],
            "startedAt": to_iso(result.attempt.started_at),
            "status": {"applied": "ok", "failed": "failed", "skipped": "skipped"}[result.status],
        }
        if result.attempt.completed_at is not None:
            run["durationMs"] = result.attempt.completed_at - result.attempt.started_at
        if result.status == "failed" and result.error is not None:
            run["error"] = {"code": result.error.code, "message": result.error.message}
        if result.detail is not None:
            run["reasoning"] = result.detail
        runs.append(run)
    return runs


def _summary(
    signals: Sequence[Signal], actions: Sequence[Action], results: Sequence[ExecutorResult]
) -> dict[str, Any]:
    status = {"applied": 0, "failed": 0, "skipped": 0}
    attempts = {"failed": 0, "retriableFailures": 0, "skipped": 0, "succeeded": 0, "total": len(results)}
    for result in results:
        status[result.status] += 1
        if result.attempt.status in ("failed", "skipped", "succeeded"):
            attempts[result.attempt.status] += 1
        if result.status == "failed" and result.error is not None and result.error.retriable:
            attempts["retriableFailures"] += 1
    domains: list[str] = []
    for s in signals:
        domain = signal_domain(s.signal_type)
        if domain not in domains:
            domains.append(domain)
    return {
        "attemptBreakdown": attempts,
        "domains": domains,
        "outcomes": [signal_outcome(s.signal_type) for s in signals],
        "statusBreakdown": status,
        "totalActions": len(actions),
        "totalSignals": len(signals),
    }


def _compressed(signals: Sequence[Signal]) -> dict[str, Any]:
    compressed: dict[str, Any] = {}
    for s in signals:
        entry = compressed.setdefault(signal_domain(s.signal_type), {"outcomes": {}, "total": 0})
        outcome = signal_outcome(s.signal_type)
        entry["outcomes"][outcome] = entry["outcomes"].get(outcome, 0) + 1
        entry["total"] += 1
    return compressed


def project_chain(
    source: Source,
    signals: Sequence[Signal],
    actions: Sequence[Action],
    results: Sequence[ExecutorResult],
    *,
    duration_ms: float | None = None,
    trace_id: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``{"envelope": AgentSignalTraceEnvelope, "record": AgentSignalTelemetryRecord}``."""
    ids = payload_ids(source)
    record = _record(source, signals, actions, results, ids, duration_ms=duration_ms, trace_id=trace_id)
    envelope = _envelope(source, signals, actions, results, ids, trace_id=trace_id, metadata=metadata)
    return {"envelope": envelope, "record": record}


def payload_ids(source: Source) -> dict[str, str | None]:
    """The source payload's ``agentId``, ``operationId`` and ``topicId`` (None when absent or not a string)."""
    return {
        "agentId": _payload_str(source, "agentId"),
        "operationId": _payload_str(source, "operationId"),
        "topicId": _payload_str(source, "topicId"),
    }


def envelope_metadata(
    source: Source, ids: dict[str, str | None], metadata: dict[str, Any] | None
) -> dict[str, Any]:
    """The envelope's ``metadata``: the scope key, the payload ids present, then ours (``metadata``)."""
    envelope_meta: dict[str, Any] = {"scopeKey": source.scope_key}
    envelope_meta.update((key, value) for key, value in ids.items() if value is not None)
    envelope_meta.update(metadata or {})
    return envelope_meta


def _conclusion(
    source: Source,
    signals: Sequence[Signal],
    final_action: Action | None,
    final_result: ExecutorResult | None,
) -> dict[str, Any]:
    """The record's ``conclusionChain``: compressed signals, the dominant path, the final reason if any."""
    dominant = [source.source_type, *(s.signal_type for s in signals)]
    if final_action is not None:
        dominant.append(final_action.action_type)
    conclusion: dict[str, Any] = {"compressedSignals": _compressed(signals), "dominantPath": dominant}
    if final_result is not None:
        reason = (
            final_result.error.message
            if final_result.status == "failed" and final_result.error
            else final_result.detail
        )
        if reason is not None:
            conclusion["finalReason"] = reason
    return conclusion


def _record(
    source: Source,
    signals: Sequence[Signal],
    actions: Sequence[Action],
    results: Sequence[ExecutorResult],
    ids: dict[str, str | None],
    *,
    duration_ms: float | None,
    trace_id: str | None,
) -> dict[str, Any]:
    """The AgentSignalTelemetryRecord; ``ids`` holds the source payload's agentId, operationId and topicId."""
    final_action = actions[-1] if actions else None
    final_result = _result_for(final_action, results) if final_action else None
    record: dict[str, Any] = {
        "chainId": source.chain.chain_id or source.chain.root_source_id,
        "conclusionChain": _conclusion(source, signals, final_action, final_result),
        "createdAt": to_iso(source.timestamp),
        "id": f"agent-signal:{source.source_id}",  # not a key: LobeHub's TelemetryRecord id
        "rootSourceId": source.chain.root_source_id,
        "scopeKey": source.scope_key,
        "sourceId": source.source_id,
        "sourceType": source.source_type,
        "summary": _summary(signals, actions, results),
    }
    if final_action is not None:
        record["finalActionId"] = final_action.action_id
        record["finalActionType"] = final_action.action_type
    if final_result is not None:
        record["finalStatus"] = final_result.status
    if duration_ms is not None:
        record["durationMs"] = round(duration_ms, 3)
    for key, value in (*ids.items(), ("traceId", trace_id)):
        if value is not None:
            record[key] = value
    return record


def _envelope(
    source: Source,
    signals: Sequence[Signal],
    actions: Sequence[Action],
    results: Sequence[ExecutorResult],
    ids: dict[str, str | None],
    *,
    trace_id: str | None,
    metadata: dict[str, Any] | None,
) -> dict[str, Any]:
    """The AgentSignalTraceEnvelope; ``ids`` as for :func:`_record`."""
    envelope_meta = envelope_metadata(source, ids, metadata)
    envelope: dict[str, Any] = {
        "actions": [a.to_json_dict() for a in actions],
        "chainId": source.chain.chain_id or source.chain.root_source_id,
        "edges": _edges(source, signals, actions, results),
        "handlerRuns": _handler_runs(actions, results),
        "metadata": envelope_meta,
        "results": [r.to_json_dict() for r in results],
        "rootSourceId": source.chain.root_source_id,
        "signals": [s.to_json_dict() for s in signals],
        "source": source.to_json_dict(),
        "version": 1,
    }
    operation_id = ids["operationId"]
    if operation_id is not None or trace_id is not None:
        envelope["traceId"] = operation_id or trace_id
    return envelope


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def trace_events(
    source: Source, signals: Sequence[Signal], actions: Sequence[Action], results: Sequence[ExecutorResult]
) -> list[dict[str, Any]]:
    """LobeHub's toAgentSignalTraceEvents: source, signals, actions, results, in that fixed order."""
    events = [_source_event(source), *(_signal_event(s) for s in signals), *map(_action_event, actions)]
    by_id = {a.action_id: a for a in actions}
    for index, r in enumerate(results):
        action = by_id.get(r.action_id)
        ts = action.timestamp if action else source.timestamp + len(signals) + len(actions) + index + 1
        events.append(_result_event(r, ts))
    return events


def _source_event(source: Source) -> dict[str, Any]:
    return {
        "type": "agent_signal.source",
        "timestamp": source.timestamp,
        "attributes": {
            "chainId": source.chain.chain_id,
            "rootSourceId": source.chain.root_source_id,
            "scopeKey": source.scope_key,
            "sourceId": source.source_id,
            "sourceType": source.source_type,
        },
    }


def _signal_event(s: Signal) -> dict[str, Any]:
    p = s.payload
    return {
        "type": "agent_signal.signal",
        "timestamp": s.timestamp,
        "attributes": _drop_none(
            {
                "classifierConfidence": p.get("skillIntentConfidence"),
                "classifierError": p.get("skillIntentError"),
                "classifierReason": p.get("skillIntentReason"),
                "confidence": p.get("confidence"),
                "parentNodeId": s.chain.parent_node_id,
                "reason": p.get("reason"),
                "satisfactionResult": p.get("satisfactionResult", p.get("result")),
                "signalId": s.signal_id,
                "signalType": s.signal_type,
                "sourceId": s.source.source_id,
                "skillActionIntent": p.get("skillActionIntent"),
                "skillIntentExplicitness": p.get("skillIntentExplicitness"),
                "skillRoute": p.get("skillRoute"),
                "target": p.get("target"),
            }
        ),
    }


def _action_event(a: Action) -> dict[str, Any]:
    return {
        "type": "agent_signal.action",
        "timestamp": a.timestamp,
        "attributes": {
            "actionId": a.action_id,
            "actionType": a.action_type,
            "parentNodeId": a.chain.parent_node_id,
            "signalId": a.signal.signal_id,
        },
    }


def _result_event(r: ExecutorResult, ts: int) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "actionId": r.action_id,
        "attemptCurrent": r.attempt.current,
        "attemptStatus": r.attempt.status,
        "detail": r.detail,
        "status": r.status,
    }
    if r.status == "failed" and r.error is not None:
        attrs["errorCode"] = r.error.code
        attrs["errorMessage"] = r.error.message
    if isinstance(r.output, dict) and isinstance(r.output.get("decision"), dict):
        attrs["outputDecision"] = r.output["decision"]
    return {"type": "agent_signal.result", "timestamp": ts, "attributes": _drop_none(attrs)}


def flatten_attributes(attributes: dict[str, Any]) -> dict[str, str | int | float | bool]:
    """Span-event attributes: primitives kept, everything else JSON-stringified, None dropped."""
    flat: dict[str, str | int | float | bool] = {}
    for key, value in attributes.items():
        if value is None:
            continue
        flat[key] = (
            value if isinstance(value, str | int | float | bool) else json.dumps(value, ensure_ascii=False)
        )
    return flat
