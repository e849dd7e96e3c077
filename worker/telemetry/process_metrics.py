"""This process's Prometheus metrics (``prometheus_client``), correct across processes by construction.

Each process counts what *it* did (the web process: events accepted at its door; a worker: events it
committed), so Prometheus sums series across pods and replicas and nothing is counted twice. A Celery worker
runs prefork children: with ``PROMETHEUS_MULTIPROC_DIR`` set (``worker.runtime.main`` sets it before the first metric
is made, see :func:`use_multiprocess_dir`) every child writes its values to memory-mapped files there and the
worker's main process serves them all, summed, on its own port (:func:`serve`). Histograms are
``prometheus_client`` histograms: cumulative buckets by construction.

Telemetry (``worker/telemetry/recorder.py``) buffers measurements and hands them over here (:meth:`ProcessMetrics.add`,
:meth:`ProcessMetrics.observe`); every instrument's label names are declared in :data:`LABELS`, and an
attribute outside them is a programming error (a test records every instrument once).

Engine-wide *state* (events waiting, stuck scopes, the DLQ) is not a per-process figure: the web app serves it
once, at ``/metrics/state`` (``producers/http/routes/ops.py``), read from Redis at scrape time.

``prometheus_client`` is imported inside functions: it picks its value class (in-memory or memory-mapped) at
import, which must come after ``PROMETHEUS_MULTIPROC_DIR`` is set.
"""

from __future__ import annotations

import functools
import os
import re
import tempfile
import threading
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "BUCKETS_MS",
    "ENGINE_DESCRIPTIONS",
    "LABELS",
    "MULTIPROC_ENV",
    "ORIGIN_DOOR",
    "ORIGIN_FOLLOW_UP",
    "OTHER_SOURCE_TYPE",
    "SOURCE_TYPE_LABELS_MAX",
    "ProcessMetrics",
    "exposition",
    "label_name",
    "process_metrics",
    "serve",
    "use_multiprocess_dir",
]

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# OpenTelemetry's default explicit bucket bounds (ms), then up to ten minutes: an event's enqueue -> done spans its
# backlog and its retries' backoff (up to AGENT_SIGNAL_RETRY_CAP_MS, a minute by default), and a histogram whose
# last bound was 10 s read a flat 10 s in every quantile past it. The OpenTelemetry meter is given the same bounds
# (worker/telemetry/recorder.py), so an OTLP collector and a Prometheus scrape agree.
BUCKETS_MS = (
    0.0,
    5.0,
    10.0,
    25.0,
    50.0,
    75.0,
    100.0,
    250.0,
    500.0,
    750.0,
    1000.0,
    2500.0,
    5000.0,
    7500.0,
    10000.0,
    30000.0,
    60000.0,
    120000.0,
    300000.0,
    600000.0,
)

_S = "agent.signal."
# The source types one process labels its series with (see ProcessMetrics._bounded); the rest are one value.
SOURCE_TYPE_ATTRIBUTE = f"{_S}source_type"
SOURCE_TYPE_LABELS_MAX = 256
OTHER_SOURCE_TYPE = "(other)"
# Instrument -> the attribute names it may carry (worker/telemetry/recorder.py's recorders). Missing ones are "".
LABELS: dict[str, tuple[str, ...]] = {
    "agent_signal_source_occurrences_total": (f"{_S}source_type",),
    "agent_signal_signal_occurrences_total": (
        f"{_S}signal_domain",
        f"{_S}signal_outcome",
        f"{_S}signal_type",
        f"{_S}source_type",
    ),
    "agent_signal_action_occurrences_total": (f"{_S}action_type",),
    "agent_signal_action_results_total": (f"{_S}action_type", f"{_S}result_status"),
    "agent_signal_chains_total": (f"{_S}final_status", f"{_S}source_type"),
    "agent_signal_signal_action_transitions_total": (
        f"{_S}action_type",
        f"{_S}signal_domain",
        f"{_S}signal_outcome",
        f"{_S}signal_type",
    ),
    "agent_signal_chain_duration_ms": (f"{_S}final_status", f"{_S}source_type"),
    "agent_signal_action_duration_ms": (f"{_S}action_type", f"{_S}result_status"),
    "agent_signal_source_events_total": (f"{_S}source_event_status", f"{_S}source_type", "tenant"),
    "agent_signal_source_event_duration_ms": (f"{_S}source_event_status", f"{_S}source_type", "tenant"),
    "agent_signal_workflow_runs_total": (f"{_S}source_type", f"{_S}workflow_status", "tenant"),
    "agent_signal_workflow_duration_ms": (f"{_S}source_type", f"{_S}workflow_status", "tenant"),
    "agent_signal_handler_runs_total": (
        f"{_S}handler_id",
        f"{_S}handler_kind",
        f"{_S}handler_status",
        f"{_S}node_type",
    ),
    "agent_signal_handler_duration_ms": (
        f"{_S}handler_id",
        f"{_S}handler_kind",
        f"{_S}handler_status",
        f"{_S}node_type",
    ),
    "agent_signal_terminal_results_total": (
        f"{_S}node_kind",
        f"{_S}node_type",
        f"{_S}terminal_reason",
        f"{_S}terminal_status",
    ),
    # The engine's own counters (not LobeHub's): what this process did with events.
    "agent_signal_events_total": ("tenant", "status", "origin"),
    "agent_signal_fence_rejected_total": ("tenant",),
    "agent_signal_event_latency_ms": ("tenant",),
    "agent_signal_store_unavailable_total": ("where",),
    "agent_signal_store_full_backoffs_total": ("where",),
}

# agent_signal_events_total's ``origin`` of admitted events (accepted, duplicate, rejected): where they came
# from. Worker outcomes (done, dead, retried, cancelled) carry none (the empty label).
ORIGIN_DOOR = "door"  # HTTP, the SDK, the CLI: what callers sent
ORIGIN_FOLLOW_UP = "follow_up"  # what the service enqueued itself: follow-ups and plugin tasks' events

ENGINE_DESCRIPTIONS = {
    "agent_signal_events_total": (
        "Source events by outcome, counted by the process that decided it: accepted, duplicate and rejected "
        "at the door (origin door), and cancelled there for a queued event; accepted and duplicate follow-ups the service enqueued itself, a chain's "
        "ctx.emit or a plugin task's emitter (origin follow_up, counted by the worker); done, dead, retried and "
        "cancelled (a running event's cancel) by the worker that committed them (no origin)."
    ),
    "agent_signal_fence_rejected_total": "Commits refused because the lease's fence was stale.",
    "agent_signal_event_latency_ms": "Enqueue to done, per event (ms), recorded by the worker that committed it.",
    "agent_signal_store_unavailable_total": "Store failures of this process (where: enqueue, drain, drain_next, door: a route, auth: a credential's lookup or rate).",
    "agent_signal_store_full_backoffs_total": (
        "Pauses of this process's work while Redis was full (where: acquire, pop, chain, commit, task): the work "
        "waited and went on without counting an attempt (worker/store/server/full.py)."
    ),
}


def label_name(attribute: str) -> str:
    """An attribute name as a Prometheus label (``agent.signal.source_type`` -> ``agent_signal_source_type``)."""
    return "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in attribute)


def _histogram(name: str) -> bool:
    return name.endswith("_ms")


def _base_name(name: str) -> str:
    """prometheus_client adds ``_total`` to a counter's samples itself."""
    return name[: -len("_total")] if name.endswith("_total") else name


class ProcessMetrics:
    """The instruments of this process, created on first use; ``add``/``observe`` take telemetry's attributes."""

    def __init__(self, descriptions: Mapping[str, str]) -> None:
        from prometheus_client import CollectorRegistry, disable_created_metrics

        disable_created_metrics()  # type: ignore[no-untyped-call]  # *_created series: nothing reads them
        self.registry = CollectorRegistry(auto_describe=False)
        self._descriptions = dict(descriptions)
        self._metrics: dict[str, Any] = {}
        self._source_types: set[str] = set()
        self._lock = threading.Lock()
        for name in LABELS:  # declared up front: a scrape lists every family, even before its first sample
            self._metric(name)

    def _metric(self, name: str) -> Any:
        metric = self._metrics.get(name)
        if metric is not None:
            return metric
        from prometheus_client import Counter, Histogram

        with self._lock:
            metric = self._metrics.get(name)
            if metric is None:
                labels = [label_name(a) for a in LABELS[name]]
                doc = self._descriptions.get(name) or ENGINE_DESCRIPTIONS.get(name) or name
                if _histogram(name):
                    metric = Histogram(name, doc, labels, registry=self.registry, buckets=BUCKETS_MS)
                else:
                    metric = Counter(_base_name(name), doc, labels, registry=self.registry)
                self._metrics[name] = metric
        return metric

    def _values(self, name: str, attrs: Mapping[str, Any]) -> list[str]:
        allowed = LABELS[name]
        extra = set(attrs) - set(allowed)
        if extra:
            raise ValueError(f"{name} has no label for attribute(s) {sorted(extra)}")
        return ["" if attrs.get(a) is None else self._bounded(a, str(attrs[a])) for a in allowed]

    def _bounded(self, attribute: str, value: str) -> str:
        """A source type past the first SOURCE_TYPE_LABELS_MAX this process has seen is counted as
        :data:`OTHER_SOURCE_TYPE`: with ``AGENT_SIGNAL_ALLOW_UNKNOWN_SOURCE_TYPES`` callers name the types, and a
        series is never dropped (100 made-up types made ~4,000 series on one worker)."""
        if attribute != SOURCE_TYPE_ATTRIBUTE or value in self._source_types:
            return value
        with self._lock:
            if len(self._source_types) >= SOURCE_TYPE_LABELS_MAX:
                return OTHER_SOURCE_TYPE
            self._source_types.add(value)
        return value

    def add(self, name: str, attrs: Mapping[str, Any], value: float = 1.0) -> None:
        self._metric(name).labels(*self._values(name, attrs)).inc(value)

    def observe(self, name: str, attrs: Mapping[str, Any], values: Iterable[float]) -> None:
        """Add a flush's ``values`` to one histogram series, pre-aggregated (see :func:`observe_many`)."""
        observe_many(self._metric(name).labels(*self._values(name, attrs)), values)


def observe_many(child: Any, values: Iterable[float]) -> None:
    """``child.observe(v)`` for every value, as one write per touched bucket and one to the sum.

    ``Histogram.observe`` writes the sum and one bucket per value, and each write in multiprocess mode is a
    locked store into a memory-mapped file: 2.3 µs a value, about 7 values per event. A flush groups a
    second's values, so the buckets are counted here first (over the sorted values, ``bisect_right`` counts
    those ``<= bound``, as ``observe``'s loop assigns them; with a NaN, value by value) and written once each. This reads three attributes prometheus_client does not
    document (``_upper_bounds``, ``_buckets``, ``_sum``: the ones its own ``observe`` uses); a unit test checks
    the exposition equals the one of observing the values one by one, so an upgrade that moves them fails
    there, not in production."""
    values = values if isinstance(values, list) else list(values)
    total = sum(values)  # left to right, as the loop that observe would run
    bounds = child._upper_bounds
    if (
        total == total
    ):  # no NaN: count each bucket's share of the sorted values (C loops, no bisect per value)
        ordered = sorted(values)
        counts, below = [], 0
        for bound in bounds:
            upto = bisect_right(ordered, bound)  # values <= bound, as observe's loop assigns them
            counts.append(upto - below)
            below = upto
    else:  # a NaN goes to the sum and no bucket, as in observe
        counts = [0] * len(bounds)
        for value in values:
            if value == value:
                counts[bisect_left(bounds, value)] += 1
    child._sum.inc(total)
    for bucket, count in zip(child._buckets, counts, strict=True):
        if count:
            bucket.inc(count)


@functools.cache
def process_metrics() -> ProcessMetrics:
    """This process's instruments (one set per process: prometheus_client refuses a name registered twice)."""
    from worker.telemetry.instruments import INSTRUMENT_DESCRIPTIONS

    return ProcessMetrics(INSTRUMENT_DESCRIPTIONS)


def use_multiprocess_dir(path: str | os.PathLike[str]) -> Path:
    """Make ``path`` this process tree's metrics directory, made if missing (mode 0700) and emptied of metric files
    first (files of an earlier run would be summed in): only the files prometheus_client names
    (``counter_<pid>.db``, ``gauge_livesum_<pid>.db``, ...) are removed, never the directory or anything else an
    operator keeps there. Call before anything imports prometheus_client: the worker's main process, before
    forking. OSError when it cannot be made or written (a file is created and removed to know)."""
    directory = Path(path)
    directory.mkdir(parents=True, mode=0o700, exist_ok=True)
    for stale in directory.iterdir():
        if _METRIC_FILE.fullmatch(stale.name) and stale.is_file():
            stale.unlink()
    with tempfile.NamedTemporaryFile(dir=directory, prefix=".agent-signal-probe-"):
        pass  # writable, or OSError now rather than at the first metric
    os.environ[MULTIPROC_ENV] = str(directory)
    return directory


# prometheus_client's multiprocess files: ``<type>_<pid>.db`` (values.py: counter, gauge_<mode>, histogram, summary)
_METRIC_FILE = re.compile(r"(counter|histogram|summary|gauge_[a-z]+)_\d+\.db")


def _registry() -> Any:
    if os.environ.get(MULTIPROC_ENV):
        from prometheus_client import CollectorRegistry
        from prometheus_client.multiprocess import MultiProcessCollector

        registry = CollectorRegistry(auto_describe=False)
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return registry
    return process_metrics().registry


def exposition() -> bytes:
    """Prometheus text of this process (and, in multiprocess mode, of every process writing to the directory)."""
    from prometheus_client import generate_latest

    return bytes(generate_latest(_registry()))


def serve(port: int, host: str = "127.0.0.1") -> Any:
    """Serve :func:`exposition` on ``host:port`` from a daemon thread (a worker's own ``/metrics``)."""
    from prometheus_client import start_http_server

    server, _thread = start_http_server(port, addr=host, registry=_registry())
    return server
