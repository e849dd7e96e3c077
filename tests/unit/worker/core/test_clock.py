"""The service's clock (worker/core/clock.py): a host's clock plus the offset measured to Redis's, left at 0 within
the dead band so that a healthy host reads its own clock exactly and a round trip's jitter changes nothing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from worker.core import clock


@pytest.fixture(autouse=True)
def _offset_back() -> Iterator[None]:
    before = clock.clock_offset_ms()
    yield
    clock._offset_ms = before


def test_an_offset_within_the_dead_band_is_not_taken() -> None:
    clock._offset_ms = 0
    assert clock.set_clock_offset_ms(clock.OFFSET_DEADBAND_MS - 1) == 0
    assert clock.set_clock_offset_ms(-(clock.OFFSET_DEADBAND_MS - 1)) == 0


def test_a_host_off_by_more_reads_redis_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host 45 s ahead: its offset is taken, and now_ms/now_us read the host's clock minus 45 s."""
    clock._offset_ms = 0
    monkeypatch.setattr(clock.time, "time", lambda: 1_000_045.0)
    monkeypatch.setattr(clock.time, "time_ns", lambda: 1_000_045 * 10**9)
    assert clock.set_clock_offset_ms(-45_000) == -45_000
    assert (clock.now_ms(), clock.now_us()) == (1_000_000_000, 1_000_000_000_000)


def test_a_re_measure_within_jitter_keeps_the_offset_and_a_healed_host_goes_back_to_zero() -> None:
    clock._offset_ms = 0
    clock.set_clock_offset_ms(-45_000)
    assert clock.set_clock_offset_ms(-45_020) == -45_000  # one round trip's jitter: no step of 20 ms
    assert clock.set_clock_offset_ms(-3) == 0  # NTP fixed the host
