"""A producer and an in-process pipeline on the same settings, for tests that enqueue and drain one scope at a time
(``pipeline.drain_scope``), closed after."""

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
