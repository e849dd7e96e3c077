"""How cost grows with the number of scopes: pipeline events/s while 100, 10,000 and 100,000 scopes exist.

The rows hold the measured workload fixed and grow only the number of distinct scopes the tenant has. Each
*window* is ``events`` events over fresh scopes, half as many as the smallest count (50 by default, so 80
events a scope at the default 4,000 events: a burst-like shape), and every row's window follows an identical
*window before*. At the smallest count these two are the whole tenant. For each larger count ``S`` a *fill*
of one event per new scope (the spread shape) first brings the tenant to ``S`` minus the two windows'
scopes, so that the row's window ends with exactly ``S``. With the default counts, one run on one set of
fresh workers (:func:`bench.pipeline_bench.pipeline_rates`, :data:`~bench.pipeline_bench.WORKER_PROCESSES`
processes) drains, in order::

    before   4,000 events over 50 scopes           -> 50 scopes exist (the first work of fresh workers)
    window   4,000 events over 50 fresh scopes     -> 100
    fill     9,800 events, 1 per scope             -> 9,900
    before   4,000 events over 50 fresh scopes     -> 9,950
    window   4,000 events over 50 fresh scopes     -> 10,000
    fill     89,900 events, 1 per scope            -> 99,900
    before   4,000 events over 50 fresh scopes     -> 99,950
    window   4,000 events over 50 fresh scopes     -> 100,000

Every scope is made by a real event through the same workers, none is written by hand. The window rows are
ratios to the first (flat = the scope count costs nothing). The window before is in each row's note: the
first one meets fresh workers, the later ones start the moment a fill's last event is done and can overlap
work the fill left behind (the workers' reconcile sweep walks every scope with queued work every 15 s, and a
90,000-event fill queues tens of thousands), so they show that transient apart from the steady cost. The
fill rows, timed like the windows, show the spread shape while the tenant grows, the second as a ratio to
the first. Each figure is one sample: a growing tenant cannot alternate rounds.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from bench.pipeline_bench import pipeline_rates

__all__ = ["DEFAULT_SCOPE_COUNTS", "ScopeGrowth", "parse_scope_counts", "scope_growth", "scope_shapes"]

DEFAULT_SCOPE_COUNTS = (100, 10_000, 100_000)

Row = tuple[str, str, str, str]
Shape = tuple[int, int]  # (events, scopes), as pipeline_rates takes them
Kind = Literal["fill", "before", "window"]


def parse_scope_counts(text: str) -> tuple[int, ...]:
    """``"100,10000,100000"`` -> counts. The first, even, is the two windows' scopes; each next count must
    exceed the previous by at least that much (room for the window before and the row's window)."""
    counts = tuple(int(part.replace("_", "")) for part in text.split(",") if part.strip())
    if not counts or counts[0] < 2 or counts[0] % 2:
        raise ValueError(f"scope counts must start with an even count of at least 2: {text!r}")
    for before, after in itertools.pairwise(counts):
        if after < before + counts[0]:
            raise ValueError(f"each scope count must exceed the previous by at least {counts[0]}: {text!r}")
    return counts


def scope_shapes(events: int, counts: Sequence[int]) -> list[tuple[Kind, Shape]]:
    """The fills and windows, in order, each tagged with its kind (see the module docstring)."""
    window = counts[0] // 2
    shapes: list[tuple[Kind, Shape]] = []
    existing = 0
    for count in counts:
        fill = count - existing - 2 * window
        if fill > 0:
            shapes.append(("fill", (fill, fill)))
        shapes += [("before", (events, window)), ("window", (events, window))]
        existing = count
    return shapes


@dataclass(frozen=True)
class ScopeGrowth:
    """Events/s of each window and of the window before it (by the scope count the row ends at), and of each
    fill (scopes before, scopes after, events/s), from one run."""

    events: int
    counts: tuple[int, ...]
    windows: dict[int, float]
    before: dict[int, float]
    fills: list[tuple[int, int, float]]

    def rows(self) -> list[Row]:
        window, base = self.counts[0] // 2, self.windows[self.counts[0]]
        rows: list[Row] = []
        for count in self.counts:
            rate, first = self.windows[count], self.before[count]
            if count == self.counts[0]:
                work = f"baseline: {self.events:,} events over {window:,} fresh scopes ({self.events / window:g}/scope)"
                when = "the first on fresh workers"
            else:
                work, when = "same", "right after the fill"
            note = f"{work}, the last of {count:,}; the window before, {when}: {first:,.0f} events/s ({first / base:.2f}x)"
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
            out[f"scopes_{count}_window_before_events_per_s"] = self.before[count]
        for before, after, rate in self.fills:
            out[f"scopes_fill_{before}_to_{after}_events_per_s"] = rate
        return out

    def notes(self) -> list[str]:
        return [
            f"scope rows: one run on one set of workers; each row's window is the same {self.events:,} events "
            f"over {self.counts[0] // 2:,} fresh scopes, ending at the row's scope count (every scope made by a "
            "real event: fills of one event per new scope), after an identical window whose rate the note gives "
            "(later ones can overlap work the fill left, e.g. a reconcile sweep over its queued scopes). One "
            "sample each."
        ]


def scope_growth(url: str, events: int, counts: Sequence[int] = DEFAULT_SCOPE_COUNTS) -> ScopeGrowth:
    """Run the fills and windows of :func:`scope_shapes` in one :func:`pipeline_rates` call."""
    tagged = scope_shapes(events, counts)
    rates, _rss = pipeline_rates(url, [shape for _kind, shape in tagged])
    windows: dict[int, float] = {}
    before: dict[int, float] = {}
    fills: list[tuple[int, int, float]] = []
    existing = 0
    for (kind, (_n, scopes)), rate in zip(tagged, rates, strict=True):
        if kind == "fill":
            fills.append((existing, existing + scopes, rate))
        elif kind == "before":
            before[existing + 2 * scopes] = rate  # keyed by the count the next window ends at
        else:
            windows[existing + scopes] = rate
        existing += scopes
    return ScopeGrowth(events=events, counts=tuple(counts), windows=windows, before=before, fills=fills)
