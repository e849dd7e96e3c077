"""Where the pipeline rows' time goes, by process: the CPU each process spent per event, and how busy the
machine's cores were, for the spread, burst and no-op shapes of ``make bench``'s pipeline section.

``python -m bench.profiling.process_cpu`` starts a private embedded Redis and the rows' two worker processes
(one child each; ``--processes N`` for N; ``--telemetry off`` for our workers without it), then runs ``--rounds`` times (2): ``--events`` lone events (the spread row's shape: one event
per scope), twice as many over 8 scopes (the burst row's), and ``--events`` no-op tasks (the baseline). Around
each it reads the CPU time (user + system, ``/proc/<pid>/stat``) of the worker processes and their children,
of the Redis server and of this process (the producer: the door, the broker sends, and the polling that
waits for the work to end), and prints per event each one's CPU, the wall time, and the share of the cores
they kept busy (``os.cpu_count()``); after each round, the CPU ratio: the no-op's CPU per task over ours per
event, the ratio the rows would read with our cores as busy as the no-op's (a row reads it times our share of
busy cores over the no-op's). Timed, so it moves with the machine; what it tells apart is *why* a row
is slow: CPU spent (which process) or cores left idle (a process waiting on another's round trip).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import NamedTuple

from redis import Redis

from bench._env import make_settings, private_redis_url, workers
from bench.pipeline_bench import BURST_SCOPES, WORKER_PROCESSES, bench_events, drain_time_s, run_noops
from producers import Producer

CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid``, of the children it has reaped (a pool child that exited) and of its
    live children, recursively; 0 for a process that is gone. Where the kernel has no ``children`` list,
    the live children are left out."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    # utime, stime, cutime, cstime: fields 14-17 of stat, counted from the state (field 3) here
    own = sum(int(f) for f in fields[11:15]) / CLOCK_TICKS_PER_S
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except (FileNotFoundError, ProcessLookupError):
        children = []
    return own + sum(cpu_s(int(child)) for child in children)


@dataclass(frozen=True)
class Split:
    """One shape's figures over its ``events``: the wall time and each side's CPU, in seconds (:meth:`row`
    prints them per event)."""

    shape: str
    events: int
    wall_s: float
    workers_s: float
    redis_s: float
    producer_s: float

    @property
    def total_cpu_s(self) -> float:
        return self.workers_s + self.redis_s + self.producer_s

    @property
    def cpu_per_event_s(self) -> float:
        return self.total_cpu_s / self.events

    @property
    def busy(self) -> float:
        """The share of the machine's cores the three sides kept busy."""
        return self.total_cpu_s / (self.wall_s * (os.cpu_count() or 1))

    def row(self) -> str:
        per = 1e6 / self.events
        busy = self.busy
        return (
            f"{self.shape:<34} {self.events / self.wall_s:>8,.0f}/s  wall {self.wall_s * per:>5.0f} us  "
            f"CPU us: workers {self.workers_s * per:>4.0f}, Redis {self.redis_s * per:>4.0f}, "
            f"producer {self.producer_s * per:>4.0f}  cores busy {busy * 100:>3.0f}%"
        )


class Meter:
    """Reads the three sides' CPU around a piece of work."""

    def __init__(self, worker_pids: list[int], redis_pid: int) -> None:
        self.worker_pids, self.redis_pid = worker_pids, redis_pid

    def read(self) -> tuple[float, float, float]:
        return (
            sum(cpu_s(pid) for pid in self.worker_pids),
            cpu_s(self.redis_pid),
            time.process_time(),
        )

    def split(self, shape: str, events: int, work: Callable[[], object]) -> Split:
        before, started = self.read(), time.perf_counter()
        work()
        wall, after = time.perf_counter() - started, self.read()
        workers_s, redis_s, producer_s = (b - a for a, b in zip(before, after, strict=True))
        return Split(shape, events, wall, workers_s, redis_s, producer_s)


class Round(NamedTuple):
    """One round's three shapes."""

    spread: Split
    burst: Split
    noop: Split

    def ceilings(self) -> str:
        """The round's CPU ratios: the no-op task's CPU per task over each shape's CPU per event, which is what
        the pipeline rows would read if ours kept the cores as busy as the no-op does; a row reads this times
        our share of busy cores over the no-op's. A goal above it needs less CPU per event, or busier cores than
        the no-op keeps (it runs at 94-98% of them here)."""
        noop = self.noop.cpu_per_event_s
        return (
            f"{'  CPU ratio, no-op / ours':<34} spread {noop / self.spread.cpu_per_event_s:.2f}x, "
            f"burst {noop / self.burst.cpu_per_event_s:.2f}x; cores busy: spread {self.spread.busy * 100:.0f}%, "
            f"burst {self.burst.busy * 100:.0f}%, no-op {self.noop.busy * 100:.0f}%"
        )


def measure(
    events: int, rounds: int, processes: int = WORKER_PROCESSES, *, telemetry: bool = True
) -> list[Round]:
    """``rounds`` times: the spread, burst and no-op shapes on ``processes`` fresh worker processes (the
    rows' two by default), our workers with telemetry on or off."""
    out: list[Round] = []
    with private_redis_url() as url:
        client = Redis.from_url(url, decode_responses=True)
        settings = make_settings(url, telemetry_enabled=telemetry)
        for r in range(rounds):
            producer = Producer(settings)  # one per round: the workers' cleanup empties the prefix
            with workers(settings, processes) as procs:
                meter = Meter([p.pid for p in procs], int(client.info("server")["process_id"]))
                shapes = [
                    ("spread (1 event/scope)", bench_events(events, events, f"pc{r}s")),
                    (f"burst ({BURST_SCOPES} scopes)", bench_events(2 * events, BURST_SCOPES, f"pc{r}b")),
                ]
                spread, burst = (
                    meter.split(shape, len(batch), partial(drain_time_s, producer, batch))
                    for shape, batch in shapes
                )
                noop = meter.split("no-op task", events, partial(run_noops, producer, client, events))
                out.append(Round(spread, burst, noop))
            producer.close()
        client.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profiling.process_cpu")
    parser.add_argument(
        "--events", type=int, default=3000, help="spread events and no-op tasks (burst: twice)"
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--processes",
        type=int,
        default=WORKER_PROCESSES,
        help=f"worker processes, one child each, for every shape (the rows': {WORKER_PROCESSES})",
    )
    parser.add_argument(
        "--telemetry",
        choices=("on", "off"),
        default="on",
        help="our workers' telemetry (the pipeline rows' default: on); run both to see what it costs per event",
    )
    args = parser.parse_args(argv)
    if args.events < 1 or args.rounds < 1 or args.processes < 1:
        parser.error("--events, --rounds and --processes must be at least 1")
    for measured in measure(args.events, args.rounds, args.processes, telemetry=args.telemetry == "on"):
        for split in measured:
            print(split.row())
        print(measured.ceilings(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
