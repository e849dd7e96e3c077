"""Reading Prometheus text in tests: sample values (summed across scrapes) and ``histogram_quantile``.

Parsing is prometheus_client's own parser; the quantile follows Prometheus's ``histogram_quantile``
(linear interpolation inside the bucket that holds the rank; the lowest bucket starts at 0).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["Sample", "bucket_bounds", "declared", "histogram_quantile", "parse", "total"]


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float


def parse(*texts: str) -> list[Sample]:
    """Every sample of every scrape given."""
    out: list[Sample] = []
    for text in texts:
        for family in text_string_to_metric_families(text):
            out.extend(Sample(s.name, dict(s.labels), float(s.value)) for s in family.samples)
    return out


def declared(*texts: str) -> set[str]:
    """The metric families the scrapes declare (HELP/TYPE), with or without samples: counters as
    ``<name>_total``, others by name."""
    out: set[str] = set()
    for text in texts:
        for family in text_string_to_metric_families(text):
            out.add(f"{family.name}_total" if family.type == "counter" else family.name)
    return out


def total(samples: Iterable[Sample], name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels`` (what ``sum(...)`` would say)."""
    return sum(
        s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


def buckets(samples: Iterable[Sample], name: str, **labels: str) -> list[tuple[float, float]]:
    """``sum by (le) (<name>_bucket{labels})``, sorted by bound: [(le, cumulative count)]."""
    by_le: dict[float, float] = {}
    for s in samples:
        if s.name == f"{name}_bucket" and all(s.labels.get(k) == v for k, v in labels.items()):
            le = float(s.labels["le"])
            by_le[le] = by_le.get(le, 0.0) + s.value
    return sorted(by_le.items())


def bucket_bounds(value: float, bounds: Iterable[float]) -> tuple[float, float]:
    """The (lower, upper] bucket of ``bounds`` holding ``value``."""
    lower = 0.0
    for upper in sorted(bounds):
        if value <= upper:
            return lower, upper
        lower = upper
    return lower, math.inf


def histogram_quantile(q: float, cumulative: list[tuple[float, float]]) -> float:
    """Prometheus's ``histogram_quantile(q, ...)`` over ``[(le, cumulative count)]`` sorted by ``le``."""
    if not cumulative or cumulative[-1][1] == 0:
        return math.nan
    count = cumulative[-1][1]
    rank = q * count
    lower, below = 0.0, 0.0
    for upper, cum in cumulative:
        if cum >= rank:
            if math.isinf(upper):
                return lower  # Prometheus answers the highest finite bound
            in_bucket = cum - below
            return lower + (upper - lower) * ((rank - below) / in_bucket if in_bucket else 0.0)
        lower, below = upper, cum
    return lower
