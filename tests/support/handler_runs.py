"""The handler-run counter (``agent_signal_handler_runs_total``) as an in-memory metric reader saw it."""

from __future__ import annotations

from opentelemetry.sdk.metrics.export import InMemoryMetricReader

__all__ = ["handler_runs"]


def handler_runs(reader: InMemoryMetricReader, handler_id: str) -> float:
    """The runs counted for ``handler_id``, summed over every data point."""
    data = reader.get_metrics_data()
    found = 0.0
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name != "agent_signal_handler_runs_total":
                    continue
                for point in metric.data.data_points:
                    if (point.attributes or {}).get("agent.signal.handler_id") == handler_id:
                        found += float(getattr(point, "value", 0))
    return found
