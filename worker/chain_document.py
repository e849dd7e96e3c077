"""The stored chain document of one run: LobeHub's ``{"envelope", "record"}`` plus our metadata (its stored form,
compressed: :mod:`worker.chain_codec`)."""

from __future__ import annotations

import json
from typing import Any

from worker.nodes import Source
from worker.projection import project_chain
from worker.scheduler import ChainTrace
from worker.telemetry import Telemetry

__all__ = ["chain_projection", "compact_json", "event_head", "peek_event"]


def chain_projection(trace: ChainTrace, source: Source, *, attempt: int) -> dict[str, Any]:
    """The stored chain document: ``{"envelope", "record"}``; our extras sit in ``envelope.metadata``."""
    trace_id, _ = Telemetry.current_ids()
    metadata: dict[str, Any] = {"eventId": source.event_id, "attempt": attempt, "status": trace.status}
    if trace.terminal is not None:
        metadata["terminal"] = trace.terminal.to_json_dict()
    return project_chain(
        source,
        trace.signals,
        trace.actions,
        trace.results,
        duration_ms=trace.duration_ms,
        trace_id=trace_id,
        metadata=metadata,
    )


def compact_json(document: dict[str, Any]) -> str:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False)


def peek_event(body: str) -> tuple[str, str | None]:
    """The source type and W3C traceparent of a stored event, without validating it."""
    try:
        data = json.loads(body)
    except ValueError:
        return "unknown", None
    if not isinstance(data, dict):
        return "unknown", None
    return str(data.get("sourceType", "unknown")), data.get("traceparent")


def event_head(body: str, source_type: str) -> tuple[str, str | None]:
    """A taken event's source type (its hash's, else its body's) and traceparent: the stored body is parsed
    only when it may hold a traceparent or the hash had no source type (an event stored before that field)."""
    if source_type and '"traceparent"' not in body:
        return source_type, None
    peeked, traceparent = peek_event(body)
    return source_type or peeked, traceparent
