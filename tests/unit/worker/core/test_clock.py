"""The service's clock (worker/core/clock.py): Redis's, kept as an offset to the monotonic clock when the host's wall
clock is off it, and the host's own wall clock, exactly, when it is within the dead band."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from worker.core import clock

S = 1_000_000  # µs


@pytest.fixture(autouse=True)
def _offset_back() -> Iterator[None]:
    before = clock._mono_offset_us
    yield
    clock._mono_offset_us = before


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """The host's clocks, in µs, set by the test."""
    now = {"wall": 1_000_045 * S, "mono": 500 * S}
    monkeypatch.setattr(clock.time, "time", lambda: now["wall"] / S)
    monkeypatch.setattr(clock.time, "time_ns", lambda: now["wall"] * 1000)
    monkeypatch.setattr(clock.time, "monotonic_ns", lambda: now["mono"] * 1000)
    return now


def test_a_host_within_the_dead_band_reads_its_own_wall_clock(host: dict[str, int]) -> None:
    clock._mono_offset_us = None
    offset = clock.set_measured(
        host["wall"] + (clock.OFFSET_DEADBAND_MS - 1) * 1000, host["wall"], host["mono"]
    )
    assert offset == clock.OFFSET_DEADBAND_MS - 1 and clock.on_own_clock()
    assert clock.now_ms() == host["wall"] // 1000


def test_a_host_45_s_ahead_reads_redis_time_and_a_later_step_of_its_wall_clock_changes_nothing(
    host: dict[str, int],
) -> None:
    """A review: an offset to the wall clock turned the host's NTP step back into a 45 s skew until the next
    measure. Kept against the monotonic clock, the step moves nothing."""
    redis = 1_000_000 * S
    assert clock.set_measured(redis, host["wall"], host["mono"]) == -45_000
    assert (clock.now_ms(), clock.now_us()) == (redis // 1000, redis)
    host["wall"] -= 45 * S  # NTP steps the host back to the right time
    host["wall"] += 2 * S  # two seconds pass
    host["mono"] += 2 * S
    assert clock.now_ms() == (redis + 2 * S) // 1000
    assert clock.clock_offset_ms() == 0  # the host's wall clock agrees with Redis's now


def test_a_re_measure_within_jitter_keeps_the_offset(host: dict[str, int]) -> None:
    redis = 1_000_000 * S
    clock.set_measured(redis, host["wall"], host["mono"])
    kept = clock._mono_offset_us
    clock.set_measured(redis + (clock.JITTER_MS - 1) * 1000, host["wall"], host["mono"])
    assert clock._mono_offset_us == kept  # no step of a round trip's noise
    clock.set_measured(redis + 5 * S, host["wall"], host["mono"])  # Redis's clock moved (a failover)
    assert clock.now_ms() == (redis + 5 * S) // 1000


def test_a_healed_host_goes_back_to_its_own_clock(host: dict[str, int]) -> None:
    clock.set_measured(1_000_000 * S, host["wall"], host["mono"])
    assert not clock.on_own_clock()
    clock.set_measured(host["wall"] + 3000, host["wall"], host["mono"])
    assert clock.on_own_clock() and clock.now_ms() == host["wall"] // 1000


def test_a_host_near_the_band_does_not_flap(host: dict[str, int]) -> None:
    """A review: measures of 49 then 51 then 49 ms stepped the clock by -51 and +51 ms. In at 50, out below 25."""
    clock._mono_offset_us = None
    clock.set_measured(host["wall"] + 51_000, host["wall"], host["mono"])
    assert not clock.on_own_clock()
    clock.set_measured(host["wall"] + 49_000, host["wall"], host["mono"])
    assert not clock.on_own_clock()
    clock.set_measured(host["wall"] + (clock.OFFSET_BACK_MS - 1) * 1000, host["wall"], host["mono"])
    assert clock.on_own_clock()
