"""Where a worker's time goes: drain a burst in this process and print a cProfile table, or compare the
worker CPU per event with telemetry on and off.

``python -m bench.profiling.profile_drain`` (3,000 events over 8 scopes, top 30 functions by own time);
``--scopes 3000`` for one event per scope, each drained on its own; ``--spread`` for one event per scope
drained as a worker drains them (one drain_next message, each commit popping the next scope);
``--telemetry`` alternates telemetry on and off three times and prints the worker's CPU per event
(``time.process_time``: this process only, so the shared machine's other load and Redis's own CPU are left
out); ``--split`` prints, per event, the CPU of each side of a burst: the producer's enqueue and Redis's
admission scripts, the drain's Python and Redis's commit scripts (Redis's from ``INFO cpu``, so run it on a
private Redis: the default). Redis is REDIS_URL or an embedded one; keys live under a private prefix that is
deleted afterwards.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from functools import partial

from redis import Redis

from bench._env import cleanup, make_settings, redis_url
from bench.pipeline_bench import BURST_SCOPES, FOREVER_S, bench_events, drain_lone_scopes, one_message
from producers import Producer
from worker.runtime.app import build_pipeline
from worker.runtime.collector import settle_collector

ENQUEUE_BATCH = 500


def _redis_cpu_s(client: Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def drain_split(
    url: str,
    events: int,
    scopes: int,
    *,
    telemetry: bool,
    around: Callable[[], AbstractContextManager[None]],
    flush_at_end: bool = False,
    spread: bool = False,
) -> dict[str, float]:
    """Enqueue ``events`` over ``scopes`` scopes, then drain them all in this process inside ``around``
    (a context manager factory); the CPU seconds per event of each side (see the module docstring).
    ``flush_at_end``: no periodic telemetry flush, one at the end inside ``around`` (under a slow profiler a
    once-a-second flush would run many times more often per event than in a real worker). ``spread``: one
    event per scope (``scopes`` is ignored), drained as a worker drains lone events: one drain_next message's
    loop, each commit popping the next scope (:func:`bench.pipeline_bench.drain_next_in_process`)."""
    if spread:
        scopes = events
    settings = make_settings(url, telemetry_enabled=telemetry, **(one_message(events) if spread else {}))
    producer = Producer(settings)
    client = Redis.from_url(url)
    batch = bench_events(events, scopes, "prof")
    try:
        redis_before, started = _redis_cpu_s(client), time.process_time()
        for start in range(0, events, ENQUEUE_BATCH):
            producer.enqueue_many(batch[start : start + ENQUEUE_BATCH])
        enqueued, redis_enqueued = time.process_time(), _redis_cpu_s(client)
        pipeline = build_pipeline(settings)
        settle_collector()  # as a worker child does once it is built (worker/runtime/app.py)
        if flush_at_end:
            pipeline.telemetry.flush_every_s = FOREVER_S
        drain_started = time.process_time()
        with around():
            if spread:
                drain_lone_scopes(pipeline, events)
            else:
                for scope in range(scopes):
                    while pipeline.drain_scope(f"topic:prof-{scope}").next == "again":
                        pass
            if flush_at_end:
                pipeline.telemetry.flush_measurements()
        drained, redis_drained = time.process_time(), _redis_cpu_s(client)
    finally:  # the private prefix goes, whatever the drain did
        cleanup(producer.store.client, settings.key_prefix)
        producer.close()
        client.close()
    return {
        "enqueue": (enqueued - started) / events,
        "enqueue redis": (redis_enqueued - redis_before) / events,
        "drain": (drained - drain_started) / events,
        "drain redis": (redis_drained - redis_enqueued) / events,
    }


class _Profiled(AbstractContextManager[None]):
    def __init__(self) -> None:
        self.profile = cProfile.Profile()

    def __enter__(self) -> None:
        self.profile.enable()

    def __exit__(self, *exc: object) -> None:
        self.profile.disable()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profiling.profile_drain")
    parser.add_argument("--events", type=int, default=3000)
    parser.add_argument("--scopes", type=int, default=BURST_SCOPES)
    parser.add_argument("--top", type=int, default=30, help="functions printed, by own time")
    parser.add_argument(
        "--telemetry", action="store_true", help="compare CPU/event with telemetry on and off"
    )
    parser.add_argument("--split", action="store_true", help="CPU/event of enqueue, drain and Redis (x3)")
    parser.add_argument(
        "--spread",
        action="store_true",
        help="one event per scope, drained through one drain_next message's loop (--scopes ignored)",
    )
    args = parser.parse_args(argv)
    if args.events < 1 or args.scopes < 1:
        parser.error("--events and --scopes must be at least 1")
    scopes = args.events if args.spread else args.scopes  # the spread's: one per event
    with redis_url() as url:
        split = partial(drain_split, url, args.events, scopes, spread=args.spread)
        if args.split:
            for _ in range(3):
                parts = split(telemetry=True, around=nullcontext)
                print("CPU per event: " + ", ".join(f"{name} {s * 1e6:.0f} us" for name, s in parts.items()))
            return 0
        if args.telemetry:
            for _ in range(3):
                on = split(telemetry=True, around=nullcontext)["drain"]
                off = split(telemetry=False, around=nullcontext)["drain"]
                print(
                    f"worker CPU per event: telemetry on {on * 1e6:.0f} us, off {off * 1e6:.0f} us "
                    f"(telemetry costs {(on - off) / off * 100:+.1f}%)"
                )
            return 0
        profiled = _Profiled()
        per_event = split(telemetry=True, around=lambda: profiled)["drain"]
        print(
            f"{per_event * 1e6:.0f} us of CPU per event under the profiler ({args.events} events, "
            f"{scopes} scopes{', one drain_next message' if args.spread else ''})"
        )
        pstats.Stats(profiled.profile, stream=sys.stdout).sort_stats("tottime").print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
