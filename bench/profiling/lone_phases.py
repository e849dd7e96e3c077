"""Where a lone event's time goes on the worker's side of the latency row: one event, one drain_next message.

``python -m bench.profiling.lone_phases`` enqueues one event in a scope of its own, then drains it in this
process as a worker's drain_next message does (:func:`bench.pipeline_bench.drain_next_in_process`: the pop that
takes its lease, the chain, the commit that finds nothing else ready), ``--events`` times (default 600, the
first 100 not counted), and prints the median of each phase: the pop script's round trip (POP_ACQUIRE), the
drain's Python before its commit, the commit's round trip (COMMIT), and what runs after it until the message's
loop returns. The enqueue → done latency row waits on the first three (the event is done once its COMMIT has
run); what comes after delays only the next message. Each script call is timed around ``Scripts.run``, where
both go (a lone event never runs ahead). Redis is REDIS_URL or an embedded one; keys live under a private
prefix that is deleted afterwards. Timed, so read it beside the same run of another tree, not alone.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from bench._env import cleanup, make_settings, redis_url
from bench.pipeline_bench import bench_events, drain_next_in_process
from producers import Producer
from worker.runtime.app import build_pipeline
from worker.store.scripts import Scripts

WARM_UP = 100  # events drained before the counted ones (imports, scripts loaded, caches filled)
PHASES = ("pop round trip", "Python before the commit", "commit round trip", "after the commit")

Call = tuple[str, float, float]  # a script's name, when its call started and when its reply was read


@contextmanager
def timed_scripts() -> Iterator[list[Call]]:
    """Every ``Scripts.run`` call in this process while inside, as (script, start, end) in ``perf_counter``."""
    calls: list[Call] = []
    run = Scripts.run

    def timed(self: Scripts, call: Any, *, client: Any = None) -> Any:
        started = time.perf_counter()
        try:
            return run(self, call, client=client)
        finally:
            calls.append((call.SCRIPT, started, time.perf_counter()))

    Scripts.run = timed  # type: ignore[method-assign]
    try:
        yield calls
    finally:
        Scripts.run = run  # type: ignore[method-assign]


def phases(calls: list[Call], ended: float) -> dict[str, float]:
    """One drain's phases in seconds, from its script calls (a pop, then a commit) and when its loop returned."""
    names = [name for name, _, _ in calls]
    if names != ["pop_acquire", "commit"]:
        raise RuntimeError(f"a lone event's drain called {names}, not POP_ACQUIRE then COMMIT")
    (_, pop_start, pop_end), (_, commit_start, commit_end) = calls
    return dict(
        zip(
            PHASES,
            (pop_end - pop_start, commit_start - pop_end, commit_end - commit_start, ended - commit_end),
            strict=True,
        )
    )


def lone_phases(url: str, events: int) -> dict[str, float]:
    """The median seconds of each phase over ``events`` lone events, each drained by a message of its own."""
    settings = make_settings(url)
    producer = Producer(settings)
    pipeline = build_pipeline(settings)
    measured: list[dict[str, float]] = []
    try:
        for i, event in enumerate(bench_events(WARM_UP + events, WARM_UP + events, "lone")):
            producer.enqueue(event)
            with timed_scripts() as calls:
                drain_next_in_process(pipeline)
                ended = time.perf_counter()
            if i >= WARM_UP:
                measured.append(phases(calls, ended))
    finally:
        cleanup(producer.store.client, settings.key_prefix)
        producer.close()
    return {name: statistics.median(m[name] for m in measured) for name in PHASES}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profiling.lone_phases")
    parser.add_argument("--events", type=int, default=500, help="lone events counted (after 100 not counted)")
    args = parser.parse_args(argv)
    if args.events < 1:
        parser.error("--events must be at least 1")
    with redis_url() as url:
        medians = lone_phases(url, args.events)
    for name, seconds in medians.items():
        print(f"{name:28s} {seconds * 1e6:8.1f} us")
    print(f"{'until done (the first three)':28s} {sum(list(medians.values())[:3]) * 1e6:8.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
