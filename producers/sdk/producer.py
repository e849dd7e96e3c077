"""The Python SDK: ``Producer.enqueue(event)`` / ``enqueue_many(events)``, straight to Redis and the broker,
and ``HttpProducer`` with the same two methods over ``POST /v1/events``.

Both validate first and enqueue nothing from a batch with an invalid event; both raise
:class:`~worker.intake.source_event.StoreUnavailable` when the store refuses a batch (none of it stored) or cannot be reached.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

import httpx
from opentelemetry import trace

from worker.chain.context import Deps
from worker.core.tenancy import DEFAULT_TENANT, check_tenant
from worker.intake.emitter import EventLike
from worker.intake.source_event import (
    EnqueueResult,
    EventError,
    InvalidEvent,
    SourceEvent,
    StoreUnavailable,
    with_traceparent,
)
from worker.keys.layout import Keys
from worker.plugin import PluginRuntime
from worker.runtime.assembly import assemble, load_plugins
from worker.settings import Settings
from worker.store.client import redis_from_settings
from worker.store.events import EventStore, PreparedEvent
from worker.telemetry.recorder import DISABLED, Telemetry

__all__ = ["HttpProducer", "Producer"]


class Producer:
    """Enqueue source events directly (the app shares the pipeline's Redis and broker).

    Validation, size limits and the plugins' admission hooks (the self-iteration gate) are the engine's
    :class:`~worker.intake.emitter.Emitter`; this class adds the enqueue span and metrics."""

    def __init__(
        self,
        settings: Settings,
        *,
        celery_app: Any | None = None,
        telemetry: Telemetry = DISABLED,
        store: EventStore | None = None,
        tenant: str = DEFAULT_TENANT,
    ) -> None:
        from worker.runtime.app import (
            create_app,  # the factory checks the settings; no app exists before this call
        )

        self.telemetry = telemetry
        self.settings = settings
        self.tenant = check_tenant(tenant)  # the SDK's events' tenant (the HTTP door passes each request's)
        self.store = store if store is not None else EventStore(redis_from_settings(settings), settings)
        self.app = celery_app if celery_app is not None else create_app(settings)
        from worker.runtime.app import fair_queue

        self.fair = fair_queue(settings, self.store, self.app)
        assembly = assemble(
            load_plugins(settings),
            settings,
            self.store,
            publish_drain=self.fair.publish,
            publish_drains=self.fair.publish_many,
            ready=self.fair,
        )
        self.emitter = assembly.emitter
        self.emitter.enforce_limits = True  # this is the door: inbox and tenant limits apply
        self.deps: Deps = assembly.deps
        self.erasers = assembly.erasers  # the plugins' parts of erasing a user
        self.runtime: PluginRuntime = assembly.runtime

    @property
    def keys(self) -> Keys:
        """The SDK's tenant's keys."""
        return self.store.keys.for_tenant(self.tenant)

    def validate(self, event: EventLike, *, prefix: str = "", tenant: str | None = None) -> PreparedEvent:
        """Validate and prepare one of ``tenant``'s events (the SDK's by default), or raise InvalidEvent naming
        the field."""
        return self.emitter.validate(event, tenant=tenant or self.tenant, prefix=prefix)

    def count_rejected(self, count: int = 1, *, tenant: str | None = None) -> None:
        """Events refused as invalid: the tenant's stats (best effort) and this process's counter."""
        tenant = tenant or self.tenant
        self.store.count_rejected(self.store.keys.for_tenant(tenant), count)
        self.telemetry.rejected(count, tenant=tenant)

    def enqueue(self, event: EventLike, *, tenant: str | None = None) -> EnqueueResult:
        """Enqueue one of ``tenant``'s events (the SDK's by default): ``accepted``, ``duplicate`` or an admission
        hook's status (``gated``)."""
        prepared = self.emitter.validate_many([event], tenant=tenant or self.tenant, single=True)
        return self.enqueue_prepared(prepared)[0]

    def enqueue_many(self, events: Iterable[EventLike], *, tenant: str | None = None) -> list[EnqueueResult]:
        """Validate every event, then enqueue all of them (none when any is invalid)."""
        return self.enqueue_prepared(self.emitter.validate_many(list(events), tenant=tenant or self.tenant))

    def enqueue_prepared(self, prepared: Sequence[PreparedEvent]) -> list[EnqueueResult]:
        """Claim and append, publish the drains; each event gets an ``agent_signal.source_event.generate`` span.
        The events are one tenant's (they carry it)."""
        if not self.telemetry.enabled or not prepared:
            return self.emitter.enqueue(prepared)
        tenant = prepared[0].tenant
        if not self.telemetry.tracing:
            started = time.perf_counter()
            results = self.emitter.enqueue(prepared)
            self.telemetry.source_events(
                [(r.status, p.source_type) for p, r in zip(prepared, results, strict=True)],
                duration_ms=(time.perf_counter() - started) * 1000,
                tenant=tenant,
            )
            self.telemetry.flush_measurements()
            return results
        return self._enqueue_traced(prepared, tenant)

    def _enqueue_traced(self, prepared: Sequence[PreparedEvent], tenant: str) -> list[EnqueueResult]:
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
            results = self.emitter.enqueue(carried)
        except Exception as exc:
            for p, span in zip(prepared, spans, strict=True):
                span.record_exception(exc)
                span.end()
                self.telemetry.source_event(
                    status="error", source_type=p.source_type, duration_ms=0.0, tenant=tenant
                )
            raise
        duration_ms = (time.perf_counter() - started) * 1000
        for p, span, result in zip(prepared, spans, results, strict=True):
            span.set_attribute("agent.signal.source_event_status", result.status)
            span.end()
            self.telemetry.source_event(
                status=result.status,
                source_type=p.source_type,
                duration_ms=duration_ms,
                tenant=tenant,
            )
        return results

    def status(self, event_id: str) -> dict[str, Any] | None:
        """The event's status record (``queued``/``processing``/``done``/``dead``), or None."""
        return self.store.get_event(self.keys, event_id)

    def close(self) -> None:
        self.store.client.close()


class HttpProducer:
    """The same SDK over HTTP (``POST /v1/events``), for apps that do not reach Redis."""

    def __init__(self, url: str, *, token: str | None = None, timeout_s: float = 30.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.has_token = bool(token)
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
        if response.status_code == 503:
            _raise_store_unavailable(response)
        response.raise_for_status()
        return [EnqueueResult.model_validate(r) for r in response.json()["results"]]

    def close(self) -> None:
        self.client.close()


def _raise_store_unavailable(response: httpx.Response) -> None:
    """A ``503 store_unavailable`` becomes :class:`StoreUnavailable` (any other 503 stays an HTTP error)."""
    try:
        error = response.json()["error"]
    except (ValueError, KeyError, TypeError):
        return
    if not isinstance(error, dict) or error.get("code") != "store_unavailable":
        return
    retry_after = response.headers.get("retry-after", "")
    raise StoreUnavailable(
        str(error.get("message") or "the store is unavailable; retry later"),
        retry_after_s=int(retry_after) if retry_after.isdigit() else 5,
    )


def _as_json(event: EventLike) -> Any:
    if isinstance(event, SourceEvent):
        return event.model_dump(by_alias=True, exclude_none=True)
    return dict(event)
