"""bench.redis_work_bench counts the server's commands per drained event on a private Redis."""

from __future__ import annotations

from bench import redis_work_bench


def test_a_lone_event_runs_more_commands_and_one_round_trip() -> None:
    work = redis_work_bench.redis_work(200)
    assert 0 < work.commands_per_event < work.spread_commands  # a lone event pays its scope's commands alone
    assert work.spread_trips[0] < work.spread_trips[1]  # the commit pops the next scope: a round trip less
    assert work.pop_grant_trips == (1, 2)
