"""How throughput grows with worker processes: pipeline events/s with 1, 2 and 4 processes, as ratios to one.

Each process is a real ``celery worker`` of this project with one child (:func:`bench._env.workers`, the same
start-up as every throughput row). Per process count, one set of fresh workers drains two workloads one after
the other: *spread* (one event per scope, the same shape and size as the ``pipeline, spread`` row) and
*burst* (the ``pipeline, burst`` row's events over 8 scopes). The counts alternate within each round, the order
reversed every other round so that a shared machine's drifting load falls on all of them alike; each figure
is the median of its rounds.

Workers, Redis and the enqueuing bench process share the machine's ``os.cpu_count()`` cores, so no ratio can
pass the core count, and on a 2-core machine not even 2x: more processes than cores only show that
oversubscription does not make things worse. :meth:`Scaling.notes` says so under the table.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass

from bench.pipeline_bench import BURST_SCOPES, pipeline_rates

__all__ = ["BURST_SCOPES", "PROCESS_COUNTS", "Scaling", "scaling_rates"]

PROCESS_COUNTS = (1, 2, 4)

Row = tuple[str, str, str, str]


@dataclass(frozen=True)
class Scaling:
    """Median events/s per worker-process count, for each workload shape."""

    spread_events: int
    burst_events: int
    spread: dict[int, float]
    burst: dict[int, float]
    cpu_count: int

    def rows(self) -> list[Row]:
        return [
            *self._rows("spread", self.spread, f"{self.spread_events:,} events, 1 event/scope"),
            *self._rows(f"burst ({BURST_SCOPES} scopes)", self.burst, f"{self.burst_events:,} events"),
        ]

    def _rows(self, shape: str, rates: dict[int, float], workload: str) -> list[Row]:
        base = rates[min(rates)]
        rows: list[Row] = []
        for procs, rate in sorted(rates.items()):
            label = f"scale {procs} proc{'s' if procs > 1 else ''}, {shape}"
            if procs == min(rates):
                note = f"baseline, {workload} ({self.cpu_count} CPU cores here)"
            elif procs > self.cpu_count:
                note = f"more processes than the {self.cpu_count} cores: cannot pass ~{self.cpu_count}x here"
            else:
                note = ""
            rows.append((label, f"{rate:,.0f} events/s", f"{rate / base:.2f}x", note))
        return rows

    def notes(self) -> list[str]:
        return [
            f"scale rows: N `celery worker` processes with one child each, on a machine with {self.cpu_count} CPU "
            f"cores (os.cpu_count()) shared with Redis and the enqueuing bench process, so no ratio can reach "
            f"{self.cpu_count}.00x here; rows past {self.cpu_count} processes show oversubscription, not a "
            "scaling limit of the pipeline."
        ]

    def figures(self) -> dict[str, float]:
        out: dict[str, float] = {"cpu_count": float(self.cpu_count)}
        for shape, rates in (("spread", self.spread), ("burst", self.burst)):
            base = rates[min(rates)]
            for procs, rate in rates.items():
                out[f"scale_{shape}_{procs}_procs_events_per_s"] = rate
                out[f"scale_{shape}_{procs}_procs_ratio"] = rate / base
        return out


def scaling_rates(
    url: str, events: int, *, rounds: int, processes: tuple[int, ...] = PROCESS_COUNTS
) -> Scaling:
    """Spread (``events // 2`` events, one per scope) and burst (``events`` over 8 scopes) rates, medians."""
    spread_n = max(1, events // 2)
    shapes = [(spread_n, spread_n), (events, BURST_SCOPES)]
    spread_runs: dict[int, list[float]] = {p: [] for p in processes}
    burst_runs: dict[int, list[float]] = {p: [] for p in processes}
    for r in range(rounds):
        for procs in processes if r % 2 == 0 else processes[::-1]:
            (spread, burst), _rss = pipeline_rates(url, shapes, processes=procs)
            spread_runs[procs].append(spread)
            burst_runs[procs].append(burst)
    return Scaling(
        spread_events=spread_n,
        burst_events=events,
        spread={p: statistics.median(v) for p, v in spread_runs.items()},
        burst={p: statistics.median(v) for p, v in burst_runs.items()},
        cpu_count=os.cpu_count() or 1,
    )
