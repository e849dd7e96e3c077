"""Full-pipeline throughput vs a plain Celery no-op task, round trips per event, latency, worker RSS."""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Sequence
from functools import partial
from typing import Any, cast

from redis import ConnectionPool, Redis

from bench._env import make_settings, peak_rss_kib, wait, workers
from producers import Producer
from worker.drain.pipeline import Pipeline
from worker.keys.layout import Keys
from worker.runtime import state
from worker.runtime.app import build_pipeline, fair_queue
from worker.runtime.plugin_model import PluginRuntime
from worker.runtime.tasks import NOOP_TASK, drain_ready
from worker.store.events import EventStore

WORKER_PROCESSES = 2  # the throughput rows' worker processes (one child each); the scaling rows vary it
BURST_SCOPES = 8  # the burst rows' scopes (the spread rows': one per event)
FOREVER_S = 1e9  # a budget or an interval that never runs out in a bench


def pipeline_on(store: EventStore) -> Pipeline:
    """The worker's pipeline in this process with every Redis call on ``store`` (its lease's scripts too): for
    the rows that count what ``store``'s client sends or what its server runs. The settings are ``store``'s."""
    from worker.drain.lease import ScopeLease

    pipeline = build_pipeline(store.settings)
    pipeline.ctx = dataclasses.replace(pipeline.ctx, store=store)
    pipeline.lease = ScopeLease(
        store.scripts,
        ttl_s=30.0,
        renew_interval_s=5.0,
        run=store.durable,
        window_s=store.settings.dedupe_window_s,
    )
    return pipeline


class NoBroker:
    """A Celery app whose sends go nowhere (:func:`drain_next_in_process`): a drain_next message stopped by a
    limit hands its ticket on, a scope with more work publishes its next drain; in-process, nobody takes them."""

    def send_task(self, name: str, *args: Any, **options: Any) -> None:
        pass


def one_message(events: int) -> dict[str, Any]:
    """Settings under which one drain_next message drains ``events`` lone scopes (and a burst's warm-up
    scopes) without stopping at ``scopes_per_drain`` or its time budget."""
    return {"scopes_per_drain": events + BURST_SCOPES, "drain_message_budget_s": FOREVER_S}


def drain_next_in_process(pipeline: Pipeline, *, take_ticket: bool = True) -> int:
    """One ``drain_next`` message's loop (:func:`worker.runtime.tasks.drain_ready`) run in this process on
    ``pipeline``'s store, as a worker runs it: it pops a ready scope, drains it, and where POP_ACQUIRE may run
    the commit that releases each scope pops the next. It stops when nothing is ready, or at the settings'
    ``scopes_per_drain`` or ``drain_message_budget_s`` (:func:`one_message` covers a spread). What the loop
    itself would send (a hand-on at a limit, a scope's next drain) goes to a :class:`NoBroker`, not to a
    broker; the pipeline's own app is the caller's. ``take_ticket``: set the message's ticket (one) first;
    False when the caller has. The process factory of :mod:`worker.runtime.state` is put back afterwards.
    Returns the scopes it drained."""
    store = pipeline.ctx.store
    fair = fair_queue(pipeline.settings, store, cast(Any, NoBroker()))
    process = state.WorkerProcess(pipeline, fair, PluginRuntime(pipeline.settings, store.client, store.keys))
    if take_ticket:
        store.client.set(store.keys.drain_tickets, 1)
    with state.installed(lambda: process):
        return drain_ready(None, "unused")


def drain_lone_scopes(pipeline: Pipeline, events: int) -> None:
    """:func:`drain_next_in_process`, which must drain ``events`` scopes (the spread's lone events)."""
    if (scopes := drain_next_in_process(pipeline)) != events:
        raise RuntimeError(f"the drain_next loop drained {scopes} scopes, not {events}")


def queue_empty(client: Redis, settings: Any) -> bool:
    """No message waits in the broker queue and none is taken and unacknowledged."""
    keys = Keys(settings.key_prefix)
    pipe = client.pipeline(transaction=False)
    pipe.llen(keys.broker_queue(settings.queue_name))
    pipe.hlen(keys.broker_queue("unacked"))
    depth, unacked = pipe.execute()
    return bool(depth == 0 and unacked == 0)


def noop_rate(url: str, n: int, *, processes: int = WORKER_PROCESSES) -> float:
    settings = make_settings(url)
    client = Redis.from_url(url, decode_responses=True)
    producer = Producer(settings)
    with workers(settings, processes):
        t0 = time.perf_counter()
        run_noops(producer, client, n)
        elapsed = time.perf_counter() - t0
    producer.close()
    return n / elapsed


def run_noops(producer: Producer, client: Redis, n: int) -> None:
    """Send ``n`` no-op tasks and wait until the workers have taken and acknowledged every one."""
    for _ in range(n):
        producer.app.send_task(NOOP_TASK, queue=producer.settings.queue_name)
    wait(lambda: queue_empty(client, producer.settings), timeout_s=600)


STAGING = "staging-"  # the workers-only rows fill a queue of this prefix before the clock starts


def prefilled_noop_rate(
    url: str, n: int, *, processes: int = WORKER_PROCESSES, timeout_s: float = 600
) -> float:
    """No-op tasks/s with the sending left out: ``n`` messages put on a staging queue first, moved onto the
    workers' queue in one ``RENAME`` once they run, timed until every one is acknowledged. The end-to-end row
    (:func:`noop_rate`) times its ``send_task`` loop, one message at a time in this process, which shares the
    cores with the workers (an audit measured it at 3.5 k sends/s, more than half of the row's window)."""
    settings = make_settings(url)
    client = Redis.from_url(url, decode_responses=True)
    producer = Producer(settings)
    keys = Keys(settings.key_prefix)
    for _ in range(n):
        producer.app.send_task(NOOP_TASK, queue=STAGING + settings.queue_name)
    with workers(settings, processes):
        t0 = time.perf_counter()
        client.rename(
            keys.broker_queue(STAGING + settings.queue_name), keys.broker_queue(settings.queue_name)
        )
        wait(lambda: queue_empty(client, settings), timeout_s=timeout_s)
        elapsed = time.perf_counter() - t0
    producer.close()
    client.close()
    return n / elapsed


def prefilled_pipeline_rate(
    url: str, n: int, scopes: int, *, processes: int = WORKER_PROCESSES, timeout_s: float = 600
) -> float:
    """Events/s with the enqueue left out, as :func:`prefilled_noop_rate` leaves out the sends: ``n`` events
    over ``scopes`` scopes stored first, their drain messages pushed on a staging queue, moved onto the workers'
    queue in one ``RENAME`` once they run, timed until the tenant's ``done`` counter has grown by ``n``."""
    settings = make_settings(url)
    staged = settings.model_copy(update={"queue_name": STAGING + settings.queue_name})
    producer = Producer(staged)
    keys = Keys(settings.key_prefix)
    target = producer.store.stats(producer.keys).get("done", 0) + n
    events = bench_events(n, scopes, f"pf{scopes}")
    for i in range(0, n, 500):
        producer.enqueue_many(events[i : i + 500])
    with workers(settings, processes):
        t0 = time.perf_counter()
        producer.store.client.rename(
            keys.broker_queue(staged.queue_name), keys.broker_queue(settings.queue_name)
        )
        wait(
            lambda: producer.store.stats(producer.keys).get("done", 0) >= target,
            timeout_s=timeout_s,
            interval_s=0.02,
        )
        elapsed = time.perf_counter() - t0
    producer.close()
    return n / elapsed


def bench_events(n: int, scopes: int, tag: str) -> list[dict[str, Any]]:
    """``n`` source events spread round-robin over ``scopes`` scopes (``tag`` keeps source ids unique)."""
    return [
        {
            "sourceType": "bot.message.merged",
            "sourceId": f"{tag}-{i}",
            "scopeKey": f"topic:{tag}-{i % scopes}",
            "payload": {"message": "Going forward, I prefer concise answers.", "messageId": f"{tag}-{i}"},
        }
        for i in range(n)
    ]


def pipeline_rate(
    url: str, n: int, scopes: int, *, processes: int = WORKER_PROCESSES, **overrides: Any
) -> tuple[float, int]:
    """(events/s for ``n`` events over ``scopes`` scopes, peak worker RSS in KiB) on fresh worker processes."""
    rates, rss = pipeline_rates(url, [(n, scopes)], processes=processes, **overrides)
    return rates[0], rss


def pipeline_rates(
    url: str, shapes: Sequence[tuple[int, int]], *, processes: int = WORKER_PROCESSES, **overrides: Any
) -> tuple[list[float], int]:
    """Events/s for each ``(events, scopes)`` workload, run one after the other on the same ``processes``
    worker processes (started once: the scaling rows measure two shapes per start), and their peak RSS."""
    settings = make_settings(url, **overrides)
    producer = Producer(settings)
    rates: list[float] = []
    with workers(settings, processes) as procs:
        for shape, (n, scopes) in enumerate(shapes):
            rates.append(n / drain_time_s(producer, bench_events(n, scopes, f"tp{shape}")))
        rss = peak_rss_kib([p.pid for p in procs])
    producer.close()
    return rates, rss


def drain_time_s(producer: Producer, events: list[dict[str, Any]]) -> float:
    """Seconds from the first enqueue until the tenant's ``done`` counter has grown by ``len(events)``."""
    target = producer.store.stats(producer.keys).get("done", 0) + len(events)
    t0 = time.perf_counter()
    for i in range(0, len(events), 500):
        producer.enqueue_many(events[i : i + 500])
    wait(lambda: producer.store.stats(producer.keys).get("done", 0) >= target, timeout_s=600, interval_s=0.02)
    return time.perf_counter() - t0


@dataclasses.dataclass(frozen=True)
class Latencies:
    """(p50, p99) in ms of the no-op task's send -> done and an event's enqueue -> done, with the lease at enqueue
    off (the default) and on (``lease_at_enqueue``), on one idle worker, the samples interleaved."""

    noop: tuple[float, float]
    ours: tuple[float, float]
    granted: tuple[float, float]


def latencies_ms(url: str, samples: int) -> Latencies:
    """The no-op task from send to its marker write, and an event from enqueue to done through a door with the
    lease at enqueue off and one with it on, on one idle worker process serving all three (a worker reads a
    message's grant whatever its own setting), the samples taken in turn: all see the same worker and the same
    moments of this shared machine, whose load moves within seconds."""
    settings = make_settings(url)
    doors = [Producer(settings), Producer(settings.model_copy(update={"lease_at_enqueue": True}))]
    client = doors[0].store.client
    noop: list[float] = []
    ours: list[list[float]] = [[], []]
    with workers(settings, 1):
        events = bench_events(2 * samples, 2 * samples, "lat")
        for i in range(samples):
            marker = f"lat-{i}"
            t0 = time.perf_counter()
            doors[0].app.send_task(NOOP_TASK, args=[marker], queue=settings.queue_name)
            wait(partial(client.exists, doors[0].store.keys.noop_marker(marker)), 30, interval_s=0.0005)
            noop.append((time.perf_counter() - t0) * 1000)
            for n, door in enumerate(doors):
                t0 = time.perf_counter()
                event_id = door.enqueue(events[2 * i + n]).event_id
                wait(
                    partial(_is_done, door, door.store.locate(door.keys, event_id).event(event_id)),
                    30,
                    interval_s=0.0005,
                )
                ours[n].append((time.perf_counter() - t0) * 1000)
    for door in doors:
        door.close()
    return Latencies(_p50_p99(noop), _p50_p99(ours[0]), _p50_p99(ours[1]))


def _p50_p99(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), ordered[int(len(ordered) * 0.99) - 1]


def _is_done(producer: Producer, event_key: str) -> bool:
    return bool(producer.store.client.hget(event_key, "state") == "done")


class CountingPool(ConnectionPool):
    """Counts client round trips: each command, each pipeline execute and each script sent ahead
    (``Scripts.send``) takes one connection from the pool."""

    round_trips = 0

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        CountingPool.round_trips += 1
        return super().get_connection(*args, **kwargs)


def round_trips_per_event(url: str, n: int, scopes: int) -> tuple[float, float]:
    """(enqueue round trips per event, worker round trips per event), measured in-process."""

    settings = make_settings(url, lease_renew_interval_s=5.0, lease_ttl_s=30.0)
    client = Redis(connection_pool=CountingPool.from_url(url, decode_responses=True))
    producer = Producer(settings)
    producer.store = producer.emitter.store = EventStore(client, settings)
    events = bench_events(n, scopes, "rt")
    CountingPool.round_trips = 0
    producer.enqueue_many(events)
    enqueue_rt = CountingPool.round_trips / n
    pipeline = pipeline_on(EventStore(client, settings))
    CountingPool.round_trips = 0
    for s in range(scopes):
        pipeline.drain_scope(f"topic:rt-{s}")
    worker_rt = CountingPool.round_trips / n
    from bench._env import cleanup

    cleanup(client, settings.key_prefix)
    producer.close()
    return enqueue_rt, worker_rt
