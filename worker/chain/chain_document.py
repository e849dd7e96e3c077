"""The stored chain document of one run: LobeHub's ``{"envelope", "record"}`` plus our metadata (its stored form,
compressed: :mod:`worker.documents.chain_codec`)."""

from __future__ import annotations

import json
from typing import Any

from worker.chain.scheduler import ChainTrace
from worker.core.nodes import Action, ExecutorResult, Signal, Source
from worker.documents.chain_storage import stored_inputs_json
from worker.documents.projection import project_chain, trace_events
from worker.telemetry.recorder import Telemetry

__all__ = ["ChainRun", "event_head", "peek_event"]


class ChainRun:
    """A finished chain's document, built as far as it is read: every commit stores the projection's inputs
    (:func:`~worker.documents.chain_storage.stored_inputs_json`, a tenth of the work of projecting and encoding), and the whole
    ``{"envelope", "record"}`` (our extras in ``envelope.metadata``) is projected once, only when something
    asks for it: the observe span of a traced chain, a development snapshot. Metrics count from the nodes.

    Both are built after the chain ended, at its commit (in a batch, after later events' chains ran): a node,
    its payload included, must not change once its chain has ended. Handlers build new nodes; none edits one."""

    __slots__ = (
        "_projection",
        "actions",
        "attempt",
        "duration_ms",
        "metadata",
        "results",
        "signals",
        "source",
        "trace",
        "trace_id",
    )

    def __init__(self, trace: ChainTrace, source: Source, *, attempt: int) -> None:
        self.trace, self.source, self.attempt = trace, source, attempt
        # the trace's own lists and duration, read as plain attributes (the metrics read them per committed
        # event; a property is a Python call each time): the chain has ended, nothing changes them now
        self.signals: list[Signal] = trace.signals
        self.actions: list[Action] = trace.actions
        self.results: list[ExecutorResult] = trace.results
        self.duration_ms: float = trace.duration_ms
        self.trace_id, _ = Telemetry.current_ids()
        self.metadata: dict[str, Any] = {
            "eventId": source.event_id,
            "attempt": attempt,
            "status": trace.status,
        }
        if trace.terminal is not None:
            self.metadata["terminal"] = trace.terminal.to_json_dict()
        self._projection: dict[str, Any] | None = None

    def _inputs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The projection's arguments, the same for the stored form and for the whole projection."""
        t = self.trace
        return (self.source, t.signals, t.actions, t.results), {
            "duration_ms": t.duration_ms,
            "trace_id": self.trace_id,
            "metadata": self.metadata,
        }

    def stored_json(self) -> bytes:
        """What the commit stores, as compact JSON (the store compresses it)."""
        args, kwargs = self._inputs()
        return stored_inputs_json(*args, **kwargs)

    def projection(self) -> dict[str, Any]:
        """LobeHub's ``{"envelope", "record"}``, projected on the first call."""
        if self._projection is None:
            args, kwargs = self._inputs()
            self._projection = project_chain(*args, **kwargs)
        return self._projection

    def events(self) -> list[dict[str, Any]]:
        """LobeHub's trace events of the chain (the observe span's events, a snapshot's)."""
        return trace_events(self.source, self.signals, self.actions, self.results)


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
