"""Metrics that survive process boundaries: an OpenTelemetry metric exporter that adds each export's deltas
to Redis hashes, and the Prometheus text rendering of those hashes for ``GET /metrics``.

Why Redis and not prometheus-client's multiprocess directory: workers and the web app run on different
hosts; they share Redis, not a filesystem. Every process exports deltas (counters and histograms) every
``metrics_export_interval_ms``; ``HINCRBYFLOAT`` makes concurrent exporters add up correctly.

Keys: ``<prefix>metrics:meta`` (name → {type, unit, description}) and ``<prefix>metrics:<name>`` with fields
``<labels json>|value`` (sums), ``<labels json>|count``, ``|sum`` and ``|le=<bound>`` (histogram buckets,
not cumulative; rendering accumulates them).
"""

from __future__ import annotations

import json
import logging
import math
from collections import defaultdict
from typing import Any

from opentelemetry.sdk.metrics import Counter, Histogram, UpDownCounter
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    HistogramDataPoint,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    NumberDataPoint,
)
from redis import Redis
from redis import exceptions as redis_errors

from worker.keys import Keys

__all__ = ["RedisMetricExporter", "render_prometheus"]

log = logging.getLogger(__name__)


def _labels_key(attributes: Any) -> str:
    return json.dumps({str(k): str(v) for k, v in sorted((attributes or {}).items())}, separators=(",", ":"))


class RedisMetricExporter(MetricExporter):
    """Adds each export's deltas to Redis (see module docstring)."""

    def __init__(self, client: Redis, keys: Keys) -> None:
        super().__init__(
            preferred_temporality={
                Counter: AggregationTemporality.DELTA,
                UpDownCounter: AggregationTemporality.DELTA,
                Histogram: AggregationTemporality.DELTA,
            }
        )
        self.client = client
        self.keys = keys

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **_: Any
    ) -> MetricExportResult:
        pipe = self.client.pipeline(transaction=False)
        writes = 0
        for resource_metrics in metrics_data.resource_metrics:
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    key = self.keys.metric(metric.name)
                    kind = (
                        "histogram"
                        if isinstance(
                            metric.data.data_points[0] if metric.data.data_points else None,
                            HistogramDataPoint,
                        )
                        else "counter"
                    )
                    pipe.hset(
                        self.keys.metrics_meta,
                        metric.name,
                        json.dumps(
                            {"type": kind, "unit": metric.unit or "", "description": metric.description or ""}
                        ),
                    )
                    for point in metric.data.data_points:
                        labels = _labels_key(point.attributes)
                        if isinstance(point, NumberDataPoint):
                            if point.value:
                                pipe.hincrbyfloat(key, f"{labels}|value", float(point.value))
                                writes += 1
                        elif isinstance(point, HistogramDataPoint) and point.count:
                            pipe.hincrbyfloat(key, f"{labels}|count", float(point.count))
                            pipe.hincrbyfloat(key, f"{labels}|sum", float(point.sum))
                            bounds = [*point.explicit_bounds, math.inf]
                            for bound, count in zip(bounds, point.bucket_counts, strict=False):
                                if count:
                                    pipe.hincrbyfloat(key, f"{labels}|le={bound}", float(count))
                            writes += 1
        if writes or len(pipe):
            try:
                pipe.execute()
            except redis_errors.ConnectionError as exc:  # Redis gone (e.g. shutting down): one line, no trace
                log.warning("metric export to Redis failed: %s", exc)
                return MetricExportResult.FAILURE
            except Exception:  # metrics must never break the pipeline
                log.exception("metric export to Redis failed")
                return MetricExportResult.FAILURE
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **_: Any) -> None:
        return None


def _prom_name(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name)


def _prom_labels(labels: dict[str, str], extra: dict[str, str] | None = None) -> str:
    items = {**{_prom_name(k): v for k, v in labels.items()}, **(extra or {})}
    if not items:
        return ""
    body = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(items.items()))
    return "{" + body + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def render_prometheus(client: Redis, keys: Keys) -> str:
    """Prometheus text exposition of everything the exporters wrote."""
    meta_raw = client.hgetall(keys.metrics_meta)
    lines: list[str] = []
    names = sorted((k if isinstance(k, str) else k.decode()) for k in meta_raw)
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.hgetall(keys.metric(name))
    for name, fields in zip(names, pipe.execute(), strict=True):
        meta = json.loads(meta_raw[name])
        prom = _prom_name(name)
        lines.append(f"# HELP {prom} {meta['description'] or name}")
        lines.append(f"# TYPE {prom} {'histogram' if meta['type'] == 'histogram' else 'counter'}")
        series: dict[str, dict[str, float]] = defaultdict(dict)
        for field, value in fields.items():
            field = field if isinstance(field, str) else field.decode()
            labels, _, part = field.rpartition("|")
            series[labels][part] = float(value)
        for labels_json, parts in sorted(series.items()):
            labels = json.loads(labels_json)
            if meta["type"] != "histogram":
                lines.append(f"{prom}{_prom_labels(labels)} {_number(parts.get('value', 0.0))}")
                continue
            bounds = sorted(float(p[3:]) for p in parts if p.startswith("le="))
            running = 0.0
            for bound in bounds:
                running += parts[f"le={bound}"]
                le = "+Inf" if math.isinf(bound) else _number(bound)
                lines.append(f"{prom}_bucket{_prom_labels(labels, {'le': le})} {_number(running)}")
            if not bounds or not math.isinf(bounds[-1]):
                lines.append(
                    f"{prom}_bucket{_prom_labels(labels, {'le': '+Inf'})} {_number(parts.get('count', 0.0))}"
                )
            lines.append(f"{prom}_sum{_prom_labels(labels)} {_number(parts.get('sum', 0.0))}")
            lines.append(f"{prom}_count{_prom_labels(labels)} {_number(parts.get('count', 0.0))}")
    return "\n".join(lines) + ("\n" if lines else "")
