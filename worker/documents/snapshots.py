"""The development snapshot bridge (LobeHub §6.6): with ``AGENT_SIGNAL_ENV=development`` each committed chain
writes ``<tracing_dir>/<ISO startedAt with ':' → '-'>_<traceId first 12>.json`` (an ExecutionSnapshot with
one step carrying the trace events) and points ``latest.json`` at it. Write errors are only logged.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from worker.core.nodes import Source
from worker.documents.projection import to_iso

__all__ = ["write_snapshot"]

log = logging.getLogger(__name__)


def write_snapshot(
    directory: str,
    source: Source,
    projection: Mapping[str, Any],
    events: Sequence[Mapping[str, Any]],
    started_ms: int,
) -> Path | None:
    try:
        operation_id = source.payload.get("operationId") or source.source_id
        trace_id = str(projection["record"].get("traceId") or operation_id)
        completed_ms = max([started_ms, *(int(e["timestamp"]) for e in events)])
        step = {
            "completedAt": completed_ms,
            "context": {
                "payload": {
                    "scopeKey": source.scope_key,
                    "sourceId": source.source_id,
                    "sourceType": source.source_type,
                },
                "phase": "agent_signal_workflow",
            },
            "events": list(events),
            "executionTimeMs": max(0, completed_ms - started_ms),
            "startedAt": started_ms,
            "stepIndex": 0,
            "stepType": "call_tool",
            "totalCost": 0,
            "totalTokens": 0,
        }
        snapshot = {
            "agentId": source.payload.get("agentId"),
            "completedAt": completed_ms,
            "completionReason": "done",
            "operationId": operation_id,
            "startedAt": started_ms,
            "steps": [step],
            "topicId": source.payload.get("topicId"),
            "totalCost": 0,
            "totalSteps": 1,
            "totalTokens": 0,
            "traceId": trace_id,
            "userId": source.user_id,
        }
        root = Path(directory)
        root.mkdir(parents=True, exist_ok=True)
        path = root / f"{to_iso(started_ms).replace(':', '-')}_{trace_id[:12]}.json"
        path.write_text(
            json.dumps({k: v for k, v in snapshot.items() if v is not None}, indent=2, ensure_ascii=False)
        )
        latest = root / "latest.json"
        tmp = root / f".latest-{os.getpid()}"
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        tmp.symlink_to(path.name)
        tmp.replace(latest)
        return path
    except Exception:
        log.exception("could not write the agent-tracing snapshot")
        return None
