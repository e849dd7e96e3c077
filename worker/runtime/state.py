"""Global state department: the one per-process :class:`WorkerProcess` (pipeline, fair queue, plugin runtime),
built lazily after fork.

Prefork children must not share the parent's Redis sockets, so it is built on first use inside the process
that runs tasks (and dropped again by ``worker_process_init``). The other module-level state of the engine is
process-wide and read-mostly: the metrics registry (worker/telemetry/process_metrics.py), the pseudonym key of
the logs (worker/telemetry/logs.py) and the instrumented flag below. Tests call :func:`reset`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from worker.drain.pipeline import Pipeline
from worker.runtime.fair import FairQueue
from worker.runtime.plugin_model import PluginRuntime
from worker.telemetry.recorder import Telemetry

__all__ = ["WorkerProcess", "flush", "get", "installed", "instrument_libraries", "reset", "set_factory"]


@dataclass(frozen=True, slots=True)
class WorkerProcess:
    """What one worker process runs with: its pipeline (drains scopes), its fair queue (pops ready scopes,
    publishes drains) and the plugins' runtime (their Celery tasks get it)."""

    pipeline: Pipeline
    fair: FairQueue
    runtime: PluginRuntime


_lock = threading.Lock()
_pipeline: WorkerProcess | None = None
_factory: object | None = None


def set_factory(factory: object) -> None:
    """Install the zero-argument callable that builds the process's :class:`WorkerProcess`."""
    global _factory, _pipeline
    with _lock:
        _factory = factory
        _pipeline = None


@contextmanager
def installed(factory: object) -> Iterator[None]:
    """``factory`` installed for the block, then the previous factory and the process it built put back: for a
    tool or a test that runs a worker's task in its own process (``bench.pipeline_bench``)."""
    global _factory, _pipeline
    with _lock:
        saved = (_factory, _pipeline)
        _factory, _pipeline = factory, None
    try:
        yield
    finally:
        with _lock:
            _factory, _pipeline = saved


def get() -> WorkerProcess:
    global _pipeline
    with _lock:
        if _pipeline is None:
            if _factory is None or not callable(_factory):
                raise RuntimeError(
                    "no pipeline factory installed: build the app with worker.runtime.app.create_app()"
                )
            built = _factory()
            if not isinstance(built, WorkerProcess):
                raise TypeError("the worker factory must build a WorkerProcess")
            _pipeline = built
        return _pipeline


def flush() -> None:
    """Export pending spans and metric deltas (worker child shutdown)."""
    with _lock:
        if _pipeline is not None:
            _pipeline.pipeline.telemetry.flush()


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
