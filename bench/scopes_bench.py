"""How cost grows with the number of scopes: pipeline events/s while 100, 10,000 and 100,000 scopes exist.

The rows hold the measured workload fixed and grow only the number of distinct scopes the tenant has: each
*window* is ``events`` events over fresh scopes, as many as the smallest count (100 by default, so 40 events a
scope at the default 4,000 events: the burst-like shape). Before the window of count ``S``, a *fill* of one
event per new scope (the spread shape) brings the tenant to ``S`` minus the window's scopes, so that the
window's own scopes make it exactly ``S``. With the default counts, one run on one set of fresh workers
(:func:`bench.pipeline_bench.pipeline_rates`, :data:`~bench.pipeline_bench.WORKER_PROCESSES` processes)
drains, in order::

    window 4,000 events over 100 scopes              -> 100 scopes exist
    fill   9,800 events, 1 per scope                 -> 9,900
    window 4,000 events over 100 fresh scopes        -> 10,000
    fill   89,900 events, 1 per scope                -> 99,900
    window 4,000 events over 100 fresh scopes        -> 100,000

Every scope is made by a real event through the same workers, none is written by hand. The window rows are
ratios to the first window (flat = the scope count costs nothing); the fill rows, timed like the windows,
show the spread shape while the tenant grows, the second as a ratio to the first. Each figure is one
sample: a growing tenant cannot alternate rounds.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from bench.pipeline_bench import pipeline_rates

__all__ = ["DEFAULT_SCOPE_COUNTS", "ScopeGrowth", "parse_scope_counts", "scope_growth", "scope_shapes"]

DEFAULT_SCOPE_COUNTS = (100, 10_000, 100_000)

Row = tuple[str, str, str, str]
Shape = tuple[int, int]  # (events, scopes), as pipeline_rates takes them


def parse_scope_counts(text: str) -> tuple[int, ...]:
    """``"100,10000,100000"`` -> counts; each must exceed the previous by at least the first (the window)."""
    counts = tuple(int(part.replace("_", "")) for part in text.split(",") if part.strip())
    if not counts or counts[0] < 1:
        raise ValueError(f"scope counts must start with a positive count: {text!r}")
    for before, after in itertools.pairwise(counts):
        if after < before + counts[0]:
            raise ValueError(f"each scope count must exceed the previous by at least {counts[0]}: {text!r}")
    return counts


def scope_shapes(events: int, counts: Sequence[int]) -> list[tuple[str, Shape]]:
    """The fills and windows, in order, each tagged ``"fill"`` or ``"window"`` (see the module docstring)."""
    window = counts[0]
    shapes: list[tuple[str, Shape]] = []
    existing = 0
    for count in counts:
        fill = count - existing - window
        if fill > 0:
            shapes.append(("fill", (fill, fill)))
            existing += fill
        shapes.append(("window", (events, window)))
        existing += window
    return shapes


@dataclass(frozen=True)
class ScopeGrowth:
    """Events/s of each window (by the scope count it ends at) and of each fill, from one run."""

    events: int
    counts: tuple[int, ...]
    windows: dict[int, float]
    fills: list[tuple[int, int, float]]  # (scopes before, scopes after, events/s)

    def rows(self) -> list[Row]:
        window, base = self.counts[0], self.windows[self.counts[0]]
        rows: list[Row] = []
        for count in self.counts:
            rate = self.windows[count]
            if count == self.counts[0]:
                note = f"baseline: {self.events:,} events over {window:,} scopes ({self.events / window:g}/scope)"
            else:
                note = f"same {self.events:,} events over {window:,} fresh scopes, the last of {count:,}"
            rows.append((f"pipeline, {count:,} scopes", f"{rate:,.0f} events/s", f"{rate / base:.2f}x", note))
        for i, (before, after, rate) in enumerate(self.fills):
            rows.append(
                (
                    f"pipeline, fill {before:,} -> {after:,} scopes",
                    f"{rate:,.0f} events/s",
                    f"{rate / self.fills[0][2]:.2f}x",
                    ("baseline, " if i == 0 else "") + f"{after - before:,} events, 1 event/scope",
                )
            )
        return rows

    def figures(self) -> dict[str, float]:
        base = self.windows[self.counts[0]]
        out: dict[str, float] = {}
        for count, rate in self.windows.items():
            out[f"scopes_{count}_events_per_s"] = rate
            out[f"scopes_{count}_ratio"] = rate / base
        for before, after, rate in self.fills:
            out[f"scopes_fill_{before}_to_{after}_events_per_s"] = rate
        return out

    def notes(self) -> list[str]:
        return [
            f"scope rows: one run on one set of workers; each window is the same {self.events:,} events over "
            f"{self.counts[0]:,} fresh scopes, after fills of one event per new scope have brought the tenant "
            "to the row's scope count (every scope made by a real event); one sample each."
        ]


def scope_growth(url: str, events: int, counts: Sequence[int] = DEFAULT_SCOPE_COUNTS) -> ScopeGrowth:
    """Run the fills and windows of :func:`scope_shapes` in one :func:`pipeline_rates` call."""
    tagged = scope_shapes(events, counts)
    rates, _rss = pipeline_rates(url, [shape for _kind, shape in tagged])
    windows: dict[int, float] = {}
    fills: list[tuple[int, int, float]] = []
    existing = 0
    for (kind, (_n, scopes)), rate in zip(tagged, rates, strict=True):
        if kind == "fill":
            fills.append((existing, existing + scopes, rate))
        existing += scopes
        if kind == "window":
            windows[existing] = rate
    return ScopeGrowth(events=events, counts=tuple(counts), windows=windows, fills=fills)
