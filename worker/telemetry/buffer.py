"""The measurement buffer behind :class:`worker.telemetry.recorder.Telemetry`'s recorders: counter increments and
histogram values are buffered and handed to this process's Prometheus instruments (and to the OpenTelemetry
instruments, when a meter is configured) by ``flush_measurements``: every ``flush_every_s`` from a daemon
thread started on first use in the recording process, at the end of an enqueue batch (the SDK), and on
``flush()`` (a worker's shutdown). Counters with the same attributes are summed first and histogram values
grouped by attributes, which turns thousands of calls into a handful. A committed event, and each walk's
handler runs, is buffered as its plan and its values (``_add_plan``, worker/telemetry/plan.py), expanded
into series only here.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from worker.telemetry.instruments import AttrsKey
from worker.telemetry.plan import EventPlan

__all__ = ["MeasurementBuffer"]

PlanValues = list[float | None]  # one event's values, in its plan's ``observed`` order (None: not observed)

log = logging.getLogger("worker.telemetry.recorder")


class MeasurementBuffer:
    """Buffered measurements, flushed into ``_sink`` (Prometheus) and ``_instruments`` (metric name → OpenTelemetry
    instrument, LobeHub's 15 only; empty without a meter) when ``enabled``."""

    enabled: bool
    _sink: Any

    def __init__(self) -> None:
        self._instruments: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, AttrsKey], float] = {}
        self._values: list[tuple[str, float, AttrsKey]] = []
        self.flush_every_s = 1.0
        self._flusher: threading.Thread | None = None
        # Events recorded by plan (worker/telemetry/plan.py): each event's values, by plan (their count too).
        self._plan_values: dict[EventPlan, list[PlanValues]] = {}

    def reset_in_forked_children(self) -> None:
        """A forked child starts with an unlocked lock, empty buffers (its parent flushes what it recorded)
        and no flusher. Called once by an enabled Telemetry; the hook holds the buffer weakly."""
        buffer = weakref.ref(self)

        def reset() -> None:
            alive = buffer()
            if alive is not None:
                alive._lock = threading.Lock()
                alive._counts, alive._values, alive._flusher = {}, [], None
                alive._plan_values = {}

        os.register_at_fork(after_in_child=reset)

    def _add(self, instrument: str, attrs: Mapping[str, Any], value: float = 1) -> None:
        key = tuple(sorted(attrs.items()))
        with self._lock:
            self._counts[(instrument, key)] = self._counts.get((instrument, key), 0) + value
        self._ensure_flusher()

    def _add_plan(self, plan: EventPlan, values: PlanValues) -> None:
        """One event of ``plan`` with its ``values``: one lock and one append (expanded at flush)."""
        with self._lock:
            rows = self._plan_values.get(plan)
            if rows is None:
                self._plan_values[plan] = [values]
            else:
                rows.append(values)
        if self._flusher is None:  # _ensure_flusher's test, without its call (twice per committed event)
            self._ensure_flusher()

    def _ensure_flusher(self) -> None:
        """A daemon thread that hands the buffer over every ``flush_every_s``, started on first use (after
        fork, inside the process that records: a forked child starts with none, reset_in_forked_children).
        One attribute read per measurement: no getpid, no ``is_alive`` (a lock acquire in threading, 5% of a
        burst's worker CPU when it ran per count); the loop never ends while the process lives."""
        if self._flusher is not None:
            return
        with self._lock:
            if self._flusher is not None:
                return

            def loop() -> None:
                while True:
                    time.sleep(self.flush_every_s)
                    try:
                        self.flush_measurements()
                    except Exception:  # never let telemetry kill the process
                        log.exception("telemetry flush failed")

            self._flusher = threading.Thread(target=loop, name="telemetry-flush", daemon=True)
            self._flusher.start()

    def _record_many(self, instrument: str, values: list[float], attrs: Mapping[str, Any]) -> None:
        key = tuple(sorted(attrs.items()))
        with self._lock:
            self._values.extend([(instrument, value, key) for value in values])

    def flush_measurements(self) -> None:
        if not self.enabled:
            return
        with self._lock:
            counts, self._counts = self._counts, {}
            values, self._values = self._values, []
            plans, self._plan_values = self._plan_values, {}
        grouped: dict[tuple[str, AttrsKey], list[float]] = {}
        for name, value, attrs in values:
            grouped.setdefault((name, attrs), []).append(value)
        for plan, rows in plans.items():  # a plan's events: each series counted once per row
            for series in plan.counted:
                counts[series] = counts.get(series, 0) + len(rows)
            for series, column in zip(plan.observed, zip(*rows, strict=True), strict=True):
                grouped.setdefault(series, []).extend([v for v in column if v is not None])
        self._hand_over_counts(counts)
        self._hand_over_values(grouped)

    def _hand_over_counts(self, counts: Mapping[tuple[str, AttrsKey], float]) -> None:
        sink, instruments = self._sink, self._instruments
        for (name, attrs), total in counts.items():
            as_dict = dict(attrs)
            if sink is not None:
                sink.add(name, as_dict, total)
            if name in instruments:
                instruments[name].add(total, as_dict)

    def _hand_over_values(self, grouped: Mapping[tuple[str, AttrsKey], list[float]]) -> None:
        sink, instruments = self._sink, self._instruments
        for (name, attrs), observed in grouped.items():
            as_dict = dict(attrs)
            if sink is not None:
                sink.observe(name, as_dict, observed)
            instrument = instruments.get(name)
            if instrument is not None:
                for value in observed:
                    instrument.record(value, as_dict)
