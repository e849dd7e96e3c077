"""Global state department: the one per-process Pipeline, built lazily after fork.

Prefork children must not share the parent's Redis sockets, so the pipeline is built on first use inside
the process that runs tasks (and dropped again by ``worker_process_init``). Nothing else in the code base
keeps module-level mutable state. Tests call :func:`reset`.
"""

from __future__ import annotations

import threading

from worker.drain.pipeline import Pipeline
from worker.telemetry.recorder import Telemetry

__all__ = ["flush", "get", "instrument_libraries", "reset", "set_factory"]

_lock = threading.Lock()
_pipeline: Pipeline | None = None
_factory: object | None = None


def set_factory(factory: object) -> None:
    """Install the zero-argument callable that builds the process's Pipeline."""
    global _factory, _pipeline
    with _lock:
        _factory = factory
        _pipeline = None


def get() -> Pipeline:
    global _pipeline
    with _lock:
        if _pipeline is None:
            if _factory is None or not callable(_factory):
                raise RuntimeError(
                    "no pipeline factory installed: build the app with worker.runtime.app.create_app()"
                )
            _pipeline = _factory()
        return _pipeline


def flush() -> None:
    """Export pending spans and metric deltas (worker child shutdown)."""
    with _lock:
        if _pipeline is not None:
            _pipeline.telemetry.flush()


_instrumented = False


def instrument_libraries(telemetry: Telemetry, *, redis_commands: bool) -> None:
    """opentelemetry-instrumentation-celery (and -redis when asked), once per process."""
    global _instrumented
    if _instrumented or not telemetry.tracing:  # instrumenting without a span consumer only costs
        return
    from opentelemetry.instrumentation.celery import CeleryInstrumentor

    CeleryInstrumentor().instrument(tracer_provider=telemetry.tracer_provider)  # type: ignore[no-untyped-call]
    if redis_commands:
        from opentelemetry.instrumentation.redis import RedisInstrumentor

        RedisInstrumentor().instrument(tracer_provider=telemetry.tracer_provider)
    _instrumented = True


def reset() -> None:
    """Forget the built pipeline (after fork, and between tests)."""
    global _pipeline
    with _lock:
        _pipeline = None
