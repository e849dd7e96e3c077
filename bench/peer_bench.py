"""Our pipeline against the peer a Celery user would write instead (:mod:`bench.peer_app`), in one run.

Both sides get the same workloads, the ``pipeline, burst`` and ``pipeline, spread`` rows' shapes: *burst* is
``events`` events over 8 scopes, *spread* ``events // 2`` events with one scope each. Both run on
:data:`bench.pipeline_bench.WORKER_PROCESSES` real ``celery worker`` processes (``--pool prefork
--concurrency 1``, acks-late, prefetch 1) against the bench's Redis, fresh workers per side per round. Each
round measures ours and then the peer (the order reversed every other round, so a shared machine's drifting
load falls on both alike); each figure is the median of its rounds. A side's time runs from its first enqueue
until its done counter has grown by the workload's size: our tenant's ``done`` stat, the peer's
``<prefix>done``. Each side enqueues its own way: ours through ``Producer.enqueue_many`` (batched), the peer
with one ``send_task`` per event, as its users would.

After its runs the peer's effects are checked: the per-scope activity counters must add up to the events
sent, exactly (:attr:`PeerComparison.exactly_once`).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from redis import Redis

from bench._env import ROOT, cleanup, stop_processes, wait
from bench.peer_app import PEER_TASK, PREFIX_ENV, REDIS_URL_ENV, PeerKeys, create_peer_app
from bench.pipeline_bench import BURST_SCOPES, WORKER_PROCESSES, pipeline_rates

__all__ = ["BURST_SCOPES", "PEER_LABEL", "PeerComparison", "PeerRun", "compare_with_peer", "peer_workers"]

PEER_LABEL = "peer task (SET NX + Lock)"

Row = tuple[str, str, str, str]


@dataclass(frozen=True)
class PeerComparison:
    """Median events/s of each side per shape, and the peer's exactly-once tally over all its runs."""

    burst_events: int
    spread_events: int
    peer_burst: float
    peer_spread: float
    ours_burst: float
    ours_spread: float
    sent: int
    applied: int
    busy_retries: int
    send_share: float  # the peer's send_task loops / its measured wall time, all runs

    @property
    def exactly_once(self) -> bool:
        return self.applied == self.sent

    def rows(self) -> list[Row]:
        burst_work = f"{self.burst_events:,} events over {BURST_SCOPES} scopes"
        spread_work = f"{self.spread_events:,} events, 1 event/scope"
        return [
            (f"{PEER_LABEL}, burst", _rate(self.peer_burst), "1.00x", f"baseline, {burst_work}"),
            (f"{PEER_LABEL}, spread", _rate(self.peer_spread), "1.00x", f"baseline, {spread_work}"),
            self._versus("burst", self.ours_burst, self.peer_burst),
            self._versus("spread", self.ours_spread, self.peer_spread),
            (
                "peer effects applied exactly once",
                f"{self.applied:,} / {self.sent:,}",
                "",
                ("OK" if self.exactly_once else "MISMATCH: counters != events sent")
                + f"; {self.busy_retries:,} lock-busy retries",
            ),
        ]

    @staticmethod
    def _versus(shape: str, ours: float, peer: float) -> Row:
        return (
            f"pipeline, {shape} vs peer",
            f"{ours:,.0f} vs {peer:,.0f} events/s",
            f"{ours / peer:.2f}x",
            "ours / peer, measured alternately in this section",
        )

    def figures(self) -> dict[str, float]:
        return {
            "peer_burst_events_per_s": self.peer_burst,
            "peer_spread_events_per_s": self.peer_spread,
            "peer_section_pipeline_burst_events_per_s": self.ours_burst,
            "peer_section_pipeline_spread_events_per_s": self.ours_spread,
            "pipeline_burst_vs_peer_ratio": self.ours_burst / self.peer_burst,
            "pipeline_spread_vs_peer_ratio": self.ours_spread / self.peer_spread,
            "peer_effects_sent": float(self.sent),
            "peer_effects_applied": float(self.applied),
            "peer_lock_busy_retries": float(self.busy_retries),
            "peer_send_share": self.send_share,
        }

    def notes(self) -> list[str]:
        notes = [
            f"peer rows: one Celery task per event on {WORKER_PROCESSES} `celery worker` processes like ours "
            "(bench/peer_app.py): SET NX dedupe key, redis-py Lock per scope (busy: self.retry(countdown=0.05)), "
            "HINCRBY + receipt SET EX + LPUSH index in one MULTI, unlock. Its events are sent with one send_task "
            f"each (ours: enqueue_many, 500 a batch); the bench process's send loop took {self.send_share:.0%} "
            "of the peer's measured time, the workers draining meanwhile."
        ]
        if not self.exactly_once:
            notes.append(f"PEER MISMATCH: {self.applied:,} effects applied for {self.sent:,} events sent")
        return notes


def _rate(events_per_s: float) -> str:
    return f"{events_per_s:,.0f} events/s"


@dataclass
class PeerRun:
    """Running peer workers, and the producer side: its app, a Redis client and its keys."""

    app: Any
    client: Redis
    keys: PeerKeys
    sent: int = 0
    send_s: float = 0.0  # of which the send_task loop
    total_s: float = 0.0

    def drain_time_s(self, n: int, scopes: int, tag: str) -> float:
        """Seconds from the first of ``n`` tasks (round-robin over ``scopes``) until ``done`` grew by ``n``."""
        target = int(self.client.get(self.keys.done) or 0) + n
        t0 = time.perf_counter()
        for i in range(n):
            self.app.send_task(
                PEER_TASK, args=[f"{tag}-{i}", f"topic:{tag}-{i % scopes}"], queue=self.keys.queue
            )
        sent_at = time.perf_counter()
        wait(lambda: int(self.client.get(self.keys.done) or 0) >= target, timeout_s=600, interval_s=0.02)
        elapsed = time.perf_counter() - t0
        self.sent, self.send_s, self.total_s = (
            self.sent + n,
            self.send_s + sent_at - t0,
            self.total_s + elapsed,
        )
        return elapsed

    def tally(self) -> tuple[int, int]:
        """(effects applied: the activity counters' sum, lock-busy retries)."""
        applied = sum(int(v) for v in self.client.hvals(self.keys.activity))
        return applied, int(self.client.get(self.keys.busy) or 0)


def peer_env(url: str, prefix: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (REDIS_URL_ENV, PREFIX_ENV)}
    env.update({REDIS_URL_ENV: url, PREFIX_ENV: prefix, "PYTHONPATH": str(ROOT)})
    return env


def worker_argv(keys: PeerKeys, index: int) -> list[str]:
    """One peer ``celery worker``: our workers' flags (bench._env.workers, worker/runtime/main.py)."""
    return [
        sys.executable, "-m", "bench.peer_app", "worker",
        "--queues", keys.queue,
        "--concurrency", "1",
        "--pool", "prefork",
        "--loglevel", "WARNING",
        "--hostname", f"peer-{os.getpid()}-{index}@%h",
        "--without-gossip",
        "--without-mingle",
    ]  # fmt: skip


@contextmanager
def peer_workers(url: str, count: int = WORKER_PROCESSES) -> Iterator[PeerRun]:
    """``count`` peer worker processes under a fresh private prefix; their keys are deleted afterwards."""
    keys = PeerKeys(f"peer-{uuid.uuid4().hex[:8]}:")
    client = Redis.from_url(url, decode_responses=True)
    app = create_peer_app(url, keys.prefix)
    procs = [
        subprocess.Popen(
            worker_argv(keys, i),
            cwd=ROOT,
            env=peer_env(url, keys.prefix),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i in range(count)
    ]
    try:
        wait(lambda: int(client.get(keys.ready) or 0) >= count, timeout_s=60, interval_s=0.1)
        yield PeerRun(app, client, keys)
    finally:
        stop_processes(procs)
        app.close()
        cleanup(client, keys.prefix)
        client.close()


def compare_with_peer(url: str, events: int, *, rounds: int) -> PeerComparison:
    """Burst (``events`` over 8 scopes) and spread (``events // 2``, one per scope), ours and the peer's."""
    spread_n = max(1, events // 2)
    shapes = [(events, BURST_SCOPES), (spread_n, spread_n)]
    ours: list[list[float]] = []
    peer: list[list[float]] = []
    sent = applied = busy = 0
    send_s = total_s = 0.0
    for r in range(rounds):
        for side in ("ours", "peer") if r % 2 == 0 else ("peer", "ours"):
            if side == "ours":
                ours.append(pipeline_rates(url, shapes)[0])
                continue
            with peer_workers(url) as run:
                peer.append([n / run.drain_time_s(n, s, f"r{r}s{k}") for k, (n, s) in enumerate(shapes)])
                run_applied, run_busy = run.tally()
                sent, applied, busy = sent + run.sent, applied + run_applied, busy + run_busy
                send_s, total_s = send_s + run.send_s, total_s + run.total_s
    return PeerComparison(
        burst_events=events,
        spread_events=spread_n,
        peer_burst=statistics.median(p[0] for p in peer),
        peer_spread=statistics.median(p[1] for p in peer),
        ours_burst=statistics.median(o[0] for o in ours),
        ours_spread=statistics.median(o[1] for o in ours),
        sent=sent,
        applied=applied,
        busy_retries=busy,
        send_share=send_s / total_s,
    )
