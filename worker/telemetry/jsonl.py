"""The development span exporter: :class:`JsonlSpanExporter` appends every finished span (name, trace and span
ids, parent, attributes, events, status, pid) as one JSON line to ``AGENT_SIGNAL_TRACE_FILE``; the end-to-end
trace test reads that file. :func:`worker.telemetry.recorder.configure_telemetry` installs it when the setting is set.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

__all__ = ["JsonlSpanExporter"]


class JsonlSpanExporter(SpanExporter):
    """Finished spans as JSON lines (name, ids, parent, attributes, events) appended to a file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = []
        for span in spans:
            ctx = span.get_span_context()
            parent = span.parent
            lines.append(
                json.dumps(
                    {
                        "name": span.name,
                        "traceId": f"{ctx.trace_id:032x}" if ctx else None,
                        "spanId": f"{ctx.span_id:016x}" if ctx else None,
                        "parentSpanId": f"{parent.span_id:016x}" if parent else None,
                        "attributes": dict(span.attributes or {}),
                        "events": [
                            {"name": e.name, "attributes": dict(e.attributes or {})} for e in span.events
                        ],
                        "status": span.status.status_code.name,
                        "pid": os.getpid(),
                    },
                    default=str,
                )
            )
        with self._lock, open(self.path, "a", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None
