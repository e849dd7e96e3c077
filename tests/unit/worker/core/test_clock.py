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


def test_a_slow_round_trip_does_not_take_a_host_off_its_own_clock(host: dict[str, int]) -> None:
    """CI: a first ``TIME`` that waited 120 ms for its connection read a host on the same clock as Redis as 60 ms
    off, and its process stamped times 60 ms ahead of its workers (an event "finished before it was enqueued")."""
    clock._mono_offset_us = None
    offset = clock.set_measured(host["wall"] + 60_000, host["wall"], host["mono"], uncertainty_us=60_000)
    assert offset == 60 and clock.on_own_clock()
    # the same reading, precise, is a host off by 60 ms
    clock.set_measured(host["wall"] + 60_000, host["wall"], host["mono"], uncertainty_us=500)
    assert not clock.on_own_clock()


def test_on_redis_clock_an_imprecise_measure_neither_returns_nor_moves_it(host: dict[str, int]) -> None:
    redis = 1_000_000 * S
    clock.set_measured(redis, host["wall"], host["mono"])
    kept = clock._mono_offset_us
    # a wall reading inside the back band, but only give or take 40 ms: not proof the host healed
    host["wall"] -= 45 * S  # NTP stepped the host back
    clock.set_measured(host["wall"] + 10_000, host["wall"], host["mono"], uncertainty_us=40_000)
    assert not clock.on_own_clock() and clock._mono_offset_us == kept
    # Redis's clock read 50 ms later than the offset says, give or take 40 ms: within jitter + uncertainty
    clock.set_measured(redis + 50_000, host["wall"], host["mono"], uncertainty_us=40_000)
    assert clock._mono_offset_us == kept
    clock.set_measured(redis + 50_000, host["wall"], host["mono"], uncertainty_us=1_000)  # the same, precise
    assert clock._mono_offset_us == kept + 50_000


class _SlowFirstClient:
    """A Redis client on the host's clock whose PING connects slowly and whose TIME round trips take the given
    times (µs): Redis reads its clock at the start of each trip, the least favourable reading."""

    def __init__(self, host: dict[str, int], trips_us: list[int]) -> None:
        self.host, self.trips_us, self.pinged = host, trips_us, False

    def ping(self) -> bool:
        self.host["wall"] += 120_000
        self.host["mono"] += 120_000
        self.pinged = True
        return True

    def time(self) -> tuple[int, int]:
        assert self.pinged, "TIME before the connection was made"
        at = self.host["wall"]
        trip = self.trips_us.pop(0)
        self.host["wall"] += trip
        self.host["mono"] += trip
        return at // S, at % S


def test_measure_connects_first_and_keeps_the_shortest_round_trip(host: dict[str, int]) -> None:
    from worker.store.server.clock_sync import measure

    client = _SlowFirstClient(host, [90_000, 2_000, 30_000])
    redis_us, wall_us, mono_us, uncertainty_us = measure(client)  # type: ignore[arg-type]
    assert uncertainty_us == 1_000 and wall_us - redis_us == 1_000 and not client.trips_us
    clock._mono_offset_us = None
    assert clock.set_measured(redis_us, wall_us, mono_us, uncertainty_us=uncertainty_us) == -1
    assert clock.on_own_clock()
