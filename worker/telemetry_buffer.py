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
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["AttrsKey", "MeasurementBuffer"]

AttrsKey = tuple[tuple[str, Any], ...]  # a series' attributes, sorted and frozen
MEMO_MAX = 10_000  # frozen attribute sets kept (cleared when full)

log = logging.getLogger("worker.telemetry")


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
        self._flushed_at = time.monotonic()
        self._flusher: threading.Thread | None = None
        self._memo: dict[tuple[Any, ...], AttrsKey] = {}

    def reset_in_forked_children(self) -> None:
        """A forked child starts with an unlocked lock, empty buffers (its parent flushes what it recorded)
        and no flusher. Called once by an enabled Telemetry; the hook holds the buffer weakly."""
        buffer = weakref.ref(self)

        def reset() -> None:
            alive = buffer()
            if alive is not None:
                alive._lock = threading.Lock()
                alive._counts, alive._values, alive._flusher = {}, [], None

        os.register_at_fork(after_in_child=reset)

    def _add(self, instrument: str, attrs: Mapping[str, Any], value: float = 1) -> None:
        self._add_key(instrument, tuple(sorted(attrs.items())), value)

    def _add_key(self, instrument: str, key: AttrsKey, value: float = 1) -> None:
        """``_add`` with the attributes already frozen (:meth:`_frozen`)."""
        with self._lock:
            self._counts[(instrument, key)] = self._counts.get((instrument, key), 0) + value
        self._ensure_flusher()

    def _add_keys(self, pairs: Sequence[tuple[str, AttrsKey]]) -> None:
        """One count each for (instrument, frozen attributes) pairs, under one lock."""
        with self._lock:
            counts = self._counts
            for pair in pairs:
                counts[pair] = counts.get(pair, 0) + 1
        self._ensure_flusher()

    def _count_and_record(self, counter: str, histogram: str, key: AttrsKey, value: float) -> None:
        """One count of ``counter`` and one ``value`` of ``histogram`` for the same series, under one lock."""
        with self._lock:
            self._counts[(counter, key)] = self._counts.get((counter, key), 0) + 1
            self._values.append((histogram, value, key))
        self._ensure_flusher()

    def _frozen(self, memo: tuple[Any, ...], build: Callable[[], Mapping[str, Any]]) -> AttrsKey:
        """The frozen attributes that ``build()`` gives for ``memo`` (the recorder's own arguments), built once:
        the hot path then makes no attribute dicts. Bounded like the series themselves (label values)."""
        key = self._memo.get(memo)
        if key is None:
            if len(self._memo) >= MEMO_MAX:
                self._memo.clear()
            key = self._memo[memo] = tuple(sorted(build().items()))
        return key

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

    def _record(self, instrument: str, value: float, attrs: Mapping[str, Any]) -> None:
        self._record_key(instrument, value, tuple(sorted(attrs.items())))

    def _record_key(self, instrument: str, value: float, key: AttrsKey) -> None:
        with self._lock:
            self._values.append((instrument, value, key))

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
