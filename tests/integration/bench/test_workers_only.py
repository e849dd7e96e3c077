"""The workers-only rows of ``make bench`` (bench/pipeline_bench.py ``prefilled_*``): each side's queue is filled on
a staging list before the clock starts and moved under the workers in one RENAME. A bench audit found the goal
rows' no-op baseline timing its one-at-a-time ``send_task`` loop against our batched enqueue; these rows leave
both doors out. What is checked is that the work is really done (each waits until every task is acknowledged, or
every event counted done, else it raises), not how fast."""

from __future__ import annotations

from bench import pipeline_bench
from bench._env import private_redis_url


def test_every_staged_task_and_event_is_taken_by_the_workers() -> None:
    with private_redis_url() as url:
        assert pipeline_bench.prefilled_noop_rate(url, 50, timeout_s=60) > 0
        assert pipeline_bench.prefilled_pipeline_rate(url, 40, 8, timeout_s=60) > 0
        assert pipeline_bench.prefilled_pipeline_rate(url, 20, 20, timeout_s=60) > 0
