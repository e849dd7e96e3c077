"""Dead events made the way a worker makes them: ``test.flaky`` events (tests/support/policies.py), each in a scope
of its own, drained in this process until they die (the settings' ``max_attempts`` must be 1)."""

from __future__ import annotations

from producers import Producer
from worker.drain.pipeline import Pipeline


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
