"""``to_iso`` writes JavaScript's ``toISOString`` form for every time, and never raises on one out of range."""

from __future__ import annotations

import pytest

from worker.documents.projection import MAX_ISO_MS, MIN_ISO_MS, to_iso


@pytest.mark.parametrize(
    ("ms", "iso"),
    [
        (0, "1970-01-01T00:00:00.000Z"),
        (-1, "1969-12-31T23:59:59.999Z"),
        (1_700_000_000_123, "2023-11-14T22:13:20.123Z"),
        (MAX_ISO_MS, "9999-12-31T23:59:59.999Z"),
        (MIN_ISO_MS, "0001-01-01T00:00:00.000Z"),
    ],
)
def test_writes_utc_with_milliseconds(ms: int, iso: str) -> None:
    """A time in range is written as UTC with milliseconds and a four-digit year."""
    assert to_iso(ms) == iso


@pytest.mark.parametrize("ms", [MAX_ISO_MS + 1, 2**53 + 1, 2**63, 10**20, 10**30])
def test_a_time_past_year_9999_is_written_as_the_last_instant(ms: int) -> None:
    """A stored time past the door's bound (kept from before it) is written as 9999-12-31T23:59:59.999Z."""
    assert to_iso(ms) == "9999-12-31T23:59:59.999Z"


@pytest.mark.parametrize("ms", [MIN_ISO_MS - 1, -(10**20)])
def test_a_time_before_year_1_is_written_as_the_first_instant(ms: int) -> None:
    """A time before year 1 is written as 0001-01-01T00:00:00.000Z."""
    assert to_iso(ms) == "0001-01-01T00:00:00.000Z"
