"""Full-pipeline throughput vs a plain Celery no-op task, round trips per event, latency, worker RSS."""

from __future__ import annotations

import statistics
import time
from typing import Any

from redis import Redis

from bench._env import make_settings, peak_rss_kib, wait, workers
from producers import Producer
from worker.app import build_pipeline
from worker.keys import Keys
from worker.tasks import NOOP_TASK


def _queue_empty(client: Redis, settings: Any) -> bool:
    keys = Keys(settings.key_prefix)
    pipe = client.pipeline(transaction=False)
    pipe.llen(keys.broker_queue(settings.queue_name))
    pipe.hlen(keys.broker_queue("unacked"))
    depth, unacked = pipe.execute()
    return bool(depth == 0 and unacked == 0)


def noop_rate(url: str, n: int) -> float:
    settings = make_settings(url)
    client = Redis.from_url(url, decode_responses=True)
    producer = Producer(settings)
    with workers(settings, 2):
        t0 = time.perf_counter()
        for _ in range(n):
            producer.app.send_task(NOOP_TASK, queue=settings.queue_name)
        wait(lambda: _queue_empty(client, settings), timeout_s=600)
        elapsed = time.perf_counter() - t0
    producer.close()
    return n / elapsed


def _events(n: int, scopes: int, tag: str) -> list[dict[str, Any]]:
    return [
        {
            "sourceType": "bot.message.merged",
            "sourceId": f"{tag}-{i}",
            "scopeKey": f"topic:{tag}-{i % scopes}",
            "payload": {"message": "Going forward, I prefer concise answers.", "messageId": f"{tag}-{i}"},
        }
        for i in range(n)
    ]


def pipeline_rate(url: str, n: int, scopes: int, **overrides: Any) -> tuple[float, int]:
    settings = make_settings(url, **overrides)
    producer = Producer(settings)
    events = _events(n, scopes, "tp")
    with workers(settings, 2) as procs:
        t0 = time.perf_counter()
        for i in range(0, n, 500):
            producer.enqueue_many(events[i : i + 500])
        wait(lambda: producer.store.stats().get("done", 0) >= n, timeout_s=600, interval_s=0.02)
        elapsed = time.perf_counter() - t0
        rss = peak_rss_kib([p.pid for p in procs])
    producer.close()
    return n / elapsed, rss


def latency_ms(url: str, samples: int) -> tuple[float, float]:
    settings = make_settings(url)
    producer = Producer(settings)
    lat: list[float] = []
    with workers(settings, 1):
        for ev in _events(samples, samples, "lat"):
            t0 = time.perf_counter()
            event_id = producer.enqueue(ev).event_id
            key = producer.store.keys.event(event_id)
            wait(
                lambda key=key: producer.store.client.hget(key, "state") == "done",
                timeout_s=30,
                interval_s=0.0005,
            )
            lat.append((time.perf_counter() - t0) * 1000)
    producer.close()
    lat.sort()
    return statistics.median(lat), lat[int(len(lat) * 0.99) - 1]


class CountingRedis(Redis):
    """Counts client round trips: each command, and each pipeline execute, is one."""

    round_trips = 0

    def execute_command(self, *args: Any, **options: Any) -> Any:
        CountingRedis.round_trips += 1
        return super().execute_command(*args, **options)

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        pipe = super().pipeline(transaction, shard_hint)
        original = pipe.execute

        def execute(raise_on_error: bool = True) -> Any:
            CountingRedis.round_trips += 1
            return original(raise_on_error)

        pipe.execute = execute  # type: ignore[method-assign]
        return pipe


def round_trips_per_event(url: str, n: int, scopes: int) -> tuple[float, float]:
    """(enqueue round trips per event, worker round trips per event), measured in-process."""
    from worker.store import EventStore

    settings = make_settings(url, lease_renew_interval_s=5.0, lease_ttl_s=30.0)
    client = CountingRedis.from_url(url, decode_responses=True)
    producer = Producer(settings)
    producer.store = producer.emitter.store = EventStore(client, settings)
    events = _events(n, scopes, "rt")
    CountingRedis.round_trips = 0
    producer.enqueue_many(events)
    enqueue_rt = CountingRedis.round_trips / n
    pipeline = build_pipeline(settings)
    pipeline.store = EventStore(client, settings)
    from worker.lease import ScopeLease

    pipeline.lease = ScopeLease(pipeline.store.scripts, pipeline.store.keys, ttl_s=30.0, renew_interval_s=5.0)
    CountingRedis.round_trips = 0
    for s in range(scopes):
        pipeline.drain_scope(f"topic:rt-{s}")
    worker_rt = CountingRedis.round_trips / n
    from bench._env import cleanup

    cleanup(client, settings.key_prefix)
    producer.close()
    return enqueue_rt, worker_rt
