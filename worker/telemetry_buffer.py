"""The measurement buffer behind :class:`worker.telemetry.Telemetry`'s recorders: counter increments and
histogram values are buffered and handed to this process's Prometheus instruments (and to the OpenTelemetry
instruments, when a meter is configured) by ``flush_measurements`` (every ``flush_every_s`` from a daemon
thread started on first use in the recording process, at the end of an enqueue batch, after each drain, and on
``flush()``); counters with the same attributes are summed first and histogram values grouped by attributes,
which turns thousands of calls into a handful.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

__all__ = ["MeasurementBuffer"]

log = logging.getLogger("worker.telemetry")


class MeasurementBuffer:
    """Buffered measurements, flushed into ``_sink`` (Prometheus) and ``_instruments`` (metric name → OpenTelemetry
    instrument, LobeHub's 15 only; empty without a meter) when ``enabled``."""

    enabled: bool
    _sink: Any

    def __init__(self) -> None:
        self._instruments: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, tuple[tuple[str, Any], ...]], float] = {}
        self._values: list[tuple[str, float, tuple[tuple[str, Any], ...]]] = []
        self.flush_every_s = 1.0
        self._flushed_at = time.monotonic()
        self._flusher: threading.Thread | None = None
        self._flusher_pid = 0

    def _add(self, instrument: str, attrs: Mapping[str, Any], value: float = 1) -> None:
        key = (instrument, tuple(sorted(attrs.items())))
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + value
        self._ensure_flusher()

    def _ensure_flusher(self) -> None:
        """A daemon thread that hands the buffer over every ``flush_every_s``, started on first use (after
        fork, inside the process that records)."""
        if self._flusher is not None and self._flusher_pid == os.getpid():
            return
        with self._lock:
            if self._flusher is not None and self._flusher_pid == os.getpid():
                return

            def loop() -> None:
                while True:
                    time.sleep(self.flush_every_s)
                    try:
                        self.flush_measurements()
                    except Exception:  # never let telemetry kill the process
                        log.exception("telemetry flush failed")

            self._flusher_pid = os.getpid()
            self._flusher = threading.Thread(target=loop, name="telemetry-flush", daemon=True)
            self._flusher.start()

    def _record(self, instrument: str, value: float, attrs: Mapping[str, Any]) -> None:
        with self._lock:
            self._values.append((instrument, value, tuple(sorted(attrs.items()))))

    def flush_measurements(self) -> None:
        if not self.enabled:
            return
        self._flushed_at = time.monotonic()
        with self._lock:
            counts, self._counts = self._counts, {}
            values, self._values = self._values, []
        sink, instruments = self._sink, self._instruments
        for (name, attrs), total in counts.items():
            as_dict = dict(attrs)
            if sink is not None:
                sink.add(name, as_dict, total)
            if name in instruments:
                instruments[name].add(total, as_dict)
        grouped: dict[tuple[str, tuple[tuple[str, Any], ...]], list[float]] = {}
        for name, value, attrs in values:
            grouped.setdefault((name, attrs), []).append(value)
        for (name, attrs), observed in grouped.items():
            as_dict = dict(attrs)
            if sink is not None:
                sink.observe(name, as_dict, observed)
            instrument = instruments.get(name)
            if instrument is not None:
                for value in observed:
                    instrument.record(value, as_dict)
