"""Draining in this process: a producer and an in-process pipeline on the same settings, closed after
(:func:`producer_and_pipeline`, for tests that enqueue and drain one scope at a time with ``pipeline.drain_scope``),
and dead events made the way a worker makes them (:func:`dead_by_drain`): ``test.flaky`` events
(tests/support/policies.py), each in a scope of its own, drained until they die (the settings' ``max_attempts``
must be 1)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from producers import Producer
from worker.drain.pipeline import Pipeline
from worker.runtime.app import build_pipeline
from worker.settings import Settings
from worker.telemetry.recorder import DISABLED


@contextmanager
def producer_and_pipeline(settings: Settings) -> Iterator[tuple[Producer, Pipeline]]:
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=DISABLED, app=producer.app)
    try:
        yield producer, pipeline
    finally:
        producer.close()
        pipeline.store.client.close()


def dead_by_drain(producer: Producer, pipeline: Pipeline, name: str, count: int) -> list[str]:
    """``count`` dead events, source ids and scopes ``<name>-<i>`` / ``topic:<name>-<i>``, in the order they died
    (each in a later millisecond of Redis's clock than the one before, so the DLQ lists them in this order)."""
    dead = []
    for i in range(count):
        scope = f"topic:{name}-{i}"
        event = {"sourceType": "test.flaky", "sourceId": f"{name}-{i}", "scopeKey": scope, "payload": {}}
        dead.append(producer.enqueue(event).event_id)
        assert pipeline.drain_scope(scope).next == "idle"
        died_by = _redis_ms(producer)  # the death was dated at or before this millisecond
        while _redis_ms(producer) <= died_by:  # the next one scores later: the DLQ lists them in this order
            pass
    return dead


def _redis_ms(producer: Producer) -> int:
    seconds, micros = producer.store.client.time()
    return int(seconds) * 1000 + int(micros) // 1000
