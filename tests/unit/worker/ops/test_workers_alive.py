"""One rule for a live worker: the probe's heartbeat file, the ``agent_signal_workers`` gauge and the console."""

from __future__ import annotations

from worker.ops.workers_view import FRESH_BEATS, is_alive
from worker.runtime.heartbeat_file import STALE_AFTER_INTERVALS, default_max_age_s
from worker.settings import Settings


def test_the_probe_and_the_store_count_the_same_intervals() -> None:
    assert STALE_AFTER_INTERVALS == FRESH_BEATS
    settings = Settings(reconcile_interval_s=15.0)
    edge_ms = int(default_max_age_s(settings.reconcile_interval_s) * 1000)
    assert is_alive(1_000_000 - edge_ms, 1_000_000, settings)
    assert not is_alive(1_000_000 - edge_ms - 1, 1_000_000, settings)


def test_a_beat_that_is_no_number_is_not_alive_and_one_ahead_is() -> None:
    settings = Settings()
    assert not is_alive("not a time", 1_000_000, settings)
    assert not is_alive(None, 1_000_000, settings)
    assert is_alive(b"1000500", 1_000_000, settings)
