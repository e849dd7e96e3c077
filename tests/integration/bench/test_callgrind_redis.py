"""bench.profiling.callgrind_redis counts the server's instructions per event for each phase, under a real valgrind."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bench.profiling import callgrind_redis

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind (apt-get install valgrind)"),
]


def test_each_phase_is_counted_and_kept(tmp_path: Path) -> None:
    enqueued, drained = callgrind_redis.per_event(16, keep=tmp_path)
    # a script call alone runs tens of thousands of the server's instructions; both phases ran some per event
    assert enqueued > 20_000 and drained > 20_000
    dumps = sorted(p.name for p in tmp_path.iterdir())
    assert len([d for d in dumps if d.endswith((".1", ".2"))]) == 2  # one dump per phase


def test_no_events_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        callgrind_redis.main(["--events", "0"])
    assert "--events must be at least 1" in capsys.readouterr().err


def test_a_lone_event_costs_the_server_more_than_a_burst_event() -> None:
    burst = callgrind_redis.per_event(128)  # 16 events per scope: commits of several, one grant per scope
    spread = callgrind_redis.per_event(32, spread=True)  # 32 scopes of one: a commit and a grant each
    assert spread[1] > burst[1] * 1.5 and spread[0] > burst[0]
