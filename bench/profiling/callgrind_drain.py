"""Instructions per drained event, counted by callgrind: repeatable where this shared machine's timings are
not (they swing ±20% minutes apart).

``python -m bench.profiling.callgrind_drain`` runs :mod:`bench.profiling.profile_drain`'s burst drain under
``valgrind --tool=callgrind --instr-atstart=no`` with instrumentation switched on only around the drain
(``callgrind_control -i on``/``off`` on its own pid), for a small and a large burst, with telemetry on and
off; the difference between the two bursts divided by the difference in events is the drain's instructions
per event, free of start-up and of the first event's imports. Telemetry is flushed once, at the end of the
drain: under valgrind a once-a-second flush would come fifty times as often per event as in a real worker, so
what is counted is each event's share of the flush, not the flush's fixed cost. Redis runs outside valgrind
(its own process), so these are the worker's Python and C only. ``--spread`` counts the other shape of the
bench's pipeline rows: one event per scope, drained as a worker drains lone events (one drain_next message's
loop, each commit popping the next scope), where each event pays its scope's lease, commit and round trip.
The children run with ``PYTHONHASHSEED=0`` unless the caller sets one (two runs of a tree then agree within
~2 k per event, against ±5 k with random hashing). Needs ``valgrind``; takes a few minutes.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from bench._env import ROOT, redis_url
from bench.pipeline_bench import BURST_SCOPES

INSTRUCTIONS_GOAL = 900_000  # per drained event, telemetry off (issue 29)
TELEMETRY_GOAL_PCT = 4.0  # telemetry on within this much more (issue 29)
TOTALS = re.compile(rb"^totals:\s+(\d+)", re.MULTILINE)


@contextmanager
def instrumented(pid: int | None = None) -> Iterator[None]:
    """Callgrind's instrumentation on for the block in process ``pid`` (default: this process, which then runs
    under valgrind)."""
    target = str(os.getpid() if pid is None else pid)
    subprocess.run(["callgrind_control", "-i", "on", target], check=True, capture_output=True)
    try:
        yield
    finally:
        subprocess.run(["callgrind_control", "-i", "off", target], check=True, capture_output=True)


def _child(events: int, scopes: int, telemetry: bool, spread: bool) -> None:
    from bench.profiling.profile_drain import drain_split

    with redis_url() as url:
        drain_split(
            url, events, scopes, telemetry=telemetry, around=instrumented, flush_at_end=True, spread=spread
        )


def warm_up(url: str, *, spread: bool) -> None:
    """A short drain outside valgrind first, so the server knows the drain's scripts before any count: else the
    first child alone would pay NOSCRIPT and SCRIPT LOAD inside its counted drain, and the difference between
    the two bursts would come out low."""
    from bench.profiling.profile_drain import drain_split

    drain_split(url, BURST_SCOPES, BURST_SCOPES, telemetry=False, around=nullcontext, spread=spread)


def instructions(events: int, scopes: int, *, telemetry: bool, url: str, spread: bool = False) -> int:
    """The instructions callgrind counted while draining ``events`` (one valgrind run); ``spread``: one event
    per scope through a drain_next message's loop (``scopes`` ignored)."""
    flags = ["1" if telemetry else "0", "1" if spread else "0"]
    return counted_child("bench.profiling.callgrind_drain", [str(events), str(scopes), *flags], url)


def counted_child(module: str, child_args: list[str], url: str) -> int:
    """Run ``python -m <module> --child <child_args>`` under ``valgrind --tool=callgrind --instr-atstart=no``
    on ``url`` and return the instructions it counted (the child switches instrumentation on around what it
    measures: :func:`instrumented`)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        argv = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={out}",
            sys.executable,
            "-m",
            module,
            "--child",
            *child_args,
        ]
        # One hash seed: with a random one, str hashes (dict and set layouts, the collector's timing) move the
        # count by up to ±5 k per event between runs of one tree; with a fixed one, by under 0.5 k on a quiet
        # machine and ~2 k on a busy one (wall-clock work: lease renewal under valgrind's slowdown).
        env = {"PYTHONHASHSEED": "0", **os.environ, "REDIS_URL": url, "PYTHONPATH": str(ROOT)}
        subprocess.run(argv, check=True, env=env, capture_output=True)
        found = TOTALS.search(out.read_bytes())
        if found is None:
            raise RuntimeError(f"callgrind wrote no totals to {out}")
        return int(found.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profiling.callgrind_drain")
    parser.add_argument("--small", type=int, default=100, help="events in the small burst")
    parser.add_argument("--large", type=int, default=500, help="events in the large burst")
    parser.add_argument("--scopes", type=int, default=BURST_SCOPES)
    parser.add_argument(
        "--spread",
        action="store_true",
        help="one event per scope, drained through one drain_next message's loop (--scopes ignored; "
        "the goals are the burst's, so no verdict is printed)",
    )
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(int(args.child[0]), int(args.child[1]), args.child[2] == "1", args.child[3] == "1")
        return 0
    if not 1 <= args.small < args.large:
        parser.error("--small must be at least 1 and less than --large")
    if args.scopes < 1:
        parser.error("--scopes must be at least 1")
    per_event: dict[bool, float] = {}
    shape = "drained spread event (one per scope, one drain_next message)" if args.spread else "drained event"
    with redis_url() as url:
        warm_up(url, spread=args.spread)
        for telemetry in (False, True):
            counts = [
                instructions(n, args.scopes, telemetry=telemetry, url=url, spread=args.spread)
                for n in (args.small, args.large)
            ]
            per_event[telemetry] = (counts[1] - counts[0]) / (args.large - args.small)
            state = "on" if telemetry else "off"
            print(f"telemetry {state}: {per_event[telemetry] / 1000:,.0f} k instructions per {shape}")
    cost = (per_event[True] - per_event[False]) / per_event[False] * 100
    print(f"telemetry costs {cost:+.1f}% of the drain's instructions")
    if args.spread:
        return 0
    off_ok = per_event[False] <= INSTRUCTIONS_GOAL
    print(
        f"goal <= {INSTRUCTIONS_GOAL / 1000:,.0f} k telemetry off (issue 29): {'holds' if off_ok else 'MISSED'}"
    )
    print(
        f"goal telemetry within +{TELEMETRY_GOAL_PCT:.0f}% (issue 29): {'holds' if cost <= TELEMETRY_GOAL_PCT else 'MISSED'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
