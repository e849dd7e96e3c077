"""The Python SDK: ``Producer.enqueue(event)`` / ``enqueue_many(events)``, straight to Redis and the broker,
and ``HttpProducer`` with the same two methods over ``POST /v1/events``.

Both validate first and enqueue nothing from a batch with an invalid event.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import httpx
from opentelemetry import trace

from policies.self_iteration.gate import GATED_SOURCE_TYPES
from policies.source_types import SourceTypePolicy
from producers._models import (
    EnqueueResult,
    EventError,
    InvalidEvent,
    SourceEvent,
    parse_event,
    prepare,
    with_traceparent,
)
from worker.redis_client import redis_from_settings
from worker.settings import Settings
from worker.store import EventStore, PreparedEvent
from worker.tasks import publish_drain
from worker.telemetry import DISABLED, Telemetry

__all__ = ["HttpProducer", "Producer"]

EventLike = SourceEvent | Mapping[str, Any]


class Producer:
    """Enqueue source events directly (the app shares the pipeline's Redis and broker)."""

    def __init__(
        self,
        settings: Settings,
        *,
        celery_app: Any | None = None,
        telemetry: Telemetry = DISABLED,
        store: EventStore | None = None,
    ) -> None:
        from worker.app import create_app  # the factory checks the settings; no app exists before this call

        self.telemetry = telemetry
        self.settings = settings
        self.types = SourceTypePolicy(
            allow_unknown=settings.allow_unknown_source_types, extra=settings.extra_source_types
        )
        # A worker that enqueues follow-up events passes its own store (one Redis pool per process).
        self.store = store if store is not None else EventStore(redis_from_settings(settings), settings)
        self.app = celery_app if celery_app is not None else create_app(settings)

    def validate(self, event: EventLike, *, prefix: str = "") -> PreparedEvent:
        """Validate and prepare one event, or raise InvalidEvent naming the field."""
        data = event.model_dump(by_alias=True, exclude_none=True) if isinstance(event, SourceEvent) else event
        parsed = parse_event(data, self.types, prefix=prefix)
        size = len(json.dumps(parsed.payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))
        if size > self.settings.max_event_bytes:
            field = f"{prefix}.payload" if prefix else "payload"
            raise InvalidEvent(
                EventError(
                    code="payload_too_large",
                    message=f"{field} is {size} bytes; the limit is {self.settings.max_event_bytes}",
                    field=field,
                ),
                status_code=413,
            )
        return prepare(parsed)

    def enqueue(self, event: EventLike) -> EnqueueResult:
        """Enqueue one event: ``accepted`` or ``duplicate``."""
        return self.enqueue_many([event], _prefix_single=True)[0]

    def enqueue_many(
        self, events: Iterable[EventLike], *, _prefix_single: bool = False
    ) -> list[EnqueueResult]:
        """Validate every event, then enqueue all of them (none when any is invalid)."""
        items = list(events)
        if len(items) > self.settings.max_batch_events:
            raise InvalidEvent(
                EventError(
                    code="batch_too_large",
                    message=f"events has {len(items)} items; the limit is {self.settings.max_batch_events}",
                    field="events",
                ),
                status_code=413,
            )
        prepared = [
            self.validate(e, prefix="" if _prefix_single else f"events[{i}]") for i, e in enumerate(items)
        ]
        return self.enqueue_prepared(prepared)

    def enqueue_prepared(self, prepared: Sequence[PreparedEvent]) -> list[EnqueueResult]:
        """Claim and append, publish the drains; each event gets an ``agent_signal.source_event.generate`` span."""
        if not self.telemetry.enabled:
            return self._enqueue(prepared)
        if not self.telemetry.tracing:
            started = time.perf_counter()
            results = self._enqueue(prepared)
            duration_ms = (time.perf_counter() - started) * 1000
            for p, result in zip(prepared, results, strict=True):
                self.telemetry.source_event(
                    status=result.status, source_type=p.source_type, duration_ms=duration_ms
                )
            self.telemetry.flush_measurements()
            return results
        started = time.perf_counter()
        tracer = self.telemetry.tracer
        spans = [
            tracer.start_span(
                "agent_signal.source_event.generate",
                attributes={
                    "agent.signal.scope_key": p.scope_key,
                    "agent.signal.source_id": p.source_id,
                    "agent.signal.source_type": p.source_type,
                },
            )
            for p in prepared
        ]
        carried = []
        for p, span in zip(prepared, spans, strict=True):
            with trace.use_span(span, end_on_exit=False):
                carried.append(with_traceparent(p, self.telemetry.traceparent()))
        try:
            results = self._enqueue(carried)
        except Exception as exc:
            for p, span in zip(prepared, spans, strict=True):
                span.record_exception(exc)
                span.end()
                self.telemetry.source_event(status="error", source_type=p.source_type, duration_ms=0.0)
            raise
        duration_ms = (time.perf_counter() - started) * 1000
        for p, span, result in zip(prepared, spans, results, strict=True):
            span.set_attribute("agent.signal.source_event_status", result.status)
            span.end()
            self.telemetry.source_event(
                status=result.status, source_type=p.source_type, duration_ms=duration_ms
            )
        return results

    def _gated(self, prepared: Sequence[PreparedEvent]) -> set[int]:
        """Indexes of self-iteration events whose user has the feature off (checked at the door)."""
        candidates = [
            (i, p.user_id)
            for i, p in enumerate(prepared)
            if p.source_type in GATED_SOURCE_TYPES and p.user_id
        ]
        if not candidates:
            return set()
        overrides = self.store.client.hmget(
            self.store.keys.self_iteration_overrides, [u for _, u in candidates]
        )
        gated = set()
        for (index, _), value in zip(candidates, overrides, strict=True):
            enabled = self.settings.self_iteration_enabled if value is None else str(value) == "1"
            if not enabled:
                gated.add(index)
        return gated

    def _enqueue(self, prepared: Sequence[PreparedEvent]) -> list[EnqueueResult]:
        gated = self._gated(prepared)
        if gated:
            allowed = [p for i, p in enumerate(prepared) if i not in gated]
            done = iter(self._enqueue(allowed))
            return [
                EnqueueResult(event_id=p.event_id, source_id=p.source_id, status="gated")
                if i in gated
                else next(done)
                for i, p in enumerate(prepared)
            ]
        outcomes = self.store.enqueue_many(prepared)
        scheduled: set[str] = set()
        for outcome in outcomes:
            if outcome.schedule and outcome.scope_key not in scheduled:
                scheduled.add(outcome.scope_key)
                publish_drain(self.app, outcome.scope_key, queue=self.settings.queue_name)
        return [EnqueueResult(event_id=o.event_id, source_id=o.source_id, status=o.status) for o in outcomes]

    def status(self, event_id: str) -> dict[str, Any] | None:
        """The event's status record (``queued``/``processing``/``done``/``dead``), or None."""
        return self.store.get_event(event_id)

    def close(self) -> None:
        self.store.client.close()


class HttpProducer:
    """The same SDK over HTTP (``POST /v1/events``), for apps that do not reach Redis."""

    def __init__(self, url: str, *, token: str | None = None, timeout_s: float = 30.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.client = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout_s)

    def enqueue(self, event: EventLike) -> EnqueueResult:
        return self._post(_as_json(event))[0]

    def enqueue_many(self, events: Iterable[EventLike]) -> list[EnqueueResult]:
        return self._post({"events": [_as_json(e) for e in events]})

    def _post(self, body: Any) -> list[EnqueueResult]:
        response = self.client.post("/v1/events", json=body)
        if response.status_code in (413, 422, 401, 403):
            try:
                error = EventError.model_validate(response.json()["error"])
            except (ValueError, KeyError):
                error = EventError(code=f"http_{response.status_code}", message=response.text[:200])
            raise InvalidEvent(error, status_code=response.status_code)
        response.raise_for_status()
        return [EnqueueResult.model_validate(r) for r in response.json()["results"]]

    def close(self) -> None:
        self.client.close()


def _as_json(event: EventLike) -> Any:
    if isinstance(event, SourceEvent):
        return event.model_dump(by_alias=True, exclude_none=True)
    return dict(event)
