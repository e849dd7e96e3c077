"""Instructions per enqueued event on the door's side, counted by callgrind: what a producer (the SDK, the HTTP
door, the CLI) runs to validate, prepare, pack and send an event and read its answer, repeatable where timings
are not.

``python -m bench.profiling.callgrind_enqueue`` runs ``Producer.enqueue_many`` (batches of 500, the bench's
burst events over 8 scopes) under ``valgrind --tool=callgrind --instr-atstart=no``, instrumentation switched
on only around the batches (``callgrind_control -i on``/``off`` on its own pid), for a small and a large
burst; the difference between the two divided by the difference in events is the figure, free of start-up and
of the first batch's imports. Redis runs outside valgrind (its own process:
``python -m bench.profiling.callgrind_redis`` counts its side). The children run with ``PYTHONHASHSEED=0``
unless the caller sets one. Needs ``valgrind``; takes about a minute.
"""

from __future__ import annotations

import argparse
import sys

from bench._env import cleanup, make_settings, redis_url
from bench.pipeline_bench import BURST_SCOPES, bench_events
from bench.profiling.callgrind_drain import counted_child, instrumented
from bench.redis_work_bench import ENQUEUE_BATCH


def _child(events: int) -> None:
    from producers import Producer

    with redis_url() as url:
        settings = make_settings(url)
        producer = Producer(settings)
        try:
            # imports made, scripts loaded
            producer.enqueue_many(bench_events(ENQUEUE_BATCH, BURST_SCOPES, "warm"))
            batch = bench_events(events, BURST_SCOPES, "cg")
            with instrumented():
                for i in range(0, len(batch), ENQUEUE_BATCH):
                    producer.enqueue_many(batch[i : i + ENQUEUE_BATCH])
        finally:
            cleanup(producer.store.client, settings.key_prefix)  # a shared REDIS_URL keeps nothing of it
            producer.close()


def instructions(events: int, url: str) -> int:
    """The instructions callgrind counted while enqueuing ``events`` (one valgrind run)."""
    return counted_child("bench.profiling.callgrind_enqueue", [str(events)], url)


def per_event(small: int, large: int) -> float:
    """Instructions per enqueued event: the large burst's count less the small one's, over the difference."""
    with redis_url() as url:
        return (instructions(large, url) - instructions(small, url)) / (large - small)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profiling.callgrind_enqueue")
    parser.add_argument("--small", type=int, default=500, help="events in the small burst (default 500)")
    parser.add_argument("--large", type=int, default=2500, help="events in the large burst (default 2,500)")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        _child(args.child)
        return 0
    if not 0 < args.small < args.large:
        parser.error("--small must be at least 1 and less than --large")
    print(f"door instructions per enqueued event: {per_event(args.small, args.large) / 1000:,.1f} k")
    return 0


if __name__ == "__main__":
    sys.exit(main())
