"""The Python SDK: ``Producer.enqueue(event)`` / ``enqueue_many(events)``, straight to Redis and the broker,
and ``HttpProducer`` with the same two methods over ``POST /v1/events``.

Both validate first and enqueue nothing from a batch with an invalid event; both raise
:class:`~worker.intake.source_event.StoreUnavailable` when the store refuses a batch (none of it stored) or cannot be reached,
and :class:`~worker.core.errors.OverLimit` for a limit (``HttpProducer`` retries a rate limit and a 503 first).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import httpx
from opentelemetry import trace

from producers.sdk.http_door import bearer_headers, bearer_token, error_of
from worker.chain.context import Deps
from worker.core.errors import OverLimit
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
    """The same SDK over HTTP (``POST /v1/events``), for apps that do not reach Redis, with the direct
    :class:`Producer`'s errors: :class:`InvalidEvent` for an event the door refuses (401, 403, 413, 422) and for a
    payload JSON has no form for (a datetime, bytes, a set, a nan: refused before sending, naming ``payload`` or
    ``events[i].payload``), :class:`OverLimit` for a 429 and :class:`StoreUnavailable` for a 503, both with
    ``retry_after_s``; another error answer is httpx's ``HTTPStatusError``.

    A 429 ``rate_limited`` or ``tenant_rate_limited`` and a 503 are sent again, at most ``max_retries`` times,
    after the answer's Retry-After while the waits add up to at most ``max_wait_s`` (default 10 s: a web handler
    calling it blocks no longer than that; 0 turns waiting off): safe, the door dedupes, so what a lost attempt
    stored answers ``duplicate``. A 429 without Retry-After (a quota) or of another limit is not.
    ``token`` is checked here (producers/sdk/http_door.py); ``client`` replaces the httpx client (the token is
    sent on every request, whichever client)."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout_s: float = 30.0,
        max_retries: int = 3,
        max_wait_s: float = 10.0,
        client: httpx.Client | None = None,
    ) -> None:
        if max_retries < 0:
            raise ValueError(f"max_retries is {max_retries}; give 0 (no retries) or more")
        if not 0 <= max_wait_s < float("inf"):
            raise ValueError(
                f"max_wait_s is {max_wait_s}; give the seconds retries may wait in all (0 or more)"
            )
        if client is not None and not str(client.base_url):
            raise ValueError("client has no base_url: give one (it replaces url), or pass no client")
        token = bearer_token(token)
        self.has_token = token is not None
        self.headers = {**bearer_headers(token), "Content-Type": "application/json"}
        self.max_retries = max_retries
        self.max_wait_s = max_wait_s
        self.client = client or httpx.Client(base_url=url.rstrip("/"), timeout=timeout_s)
        self.sleep: Callable[[float], None] = time.sleep  # the wait before a retry (tests record it)

    def enqueue(self, event: EventLike) -> EnqueueResult:
        item = _as_json(event)
        return self._post(_encoded(item, [item], single=True))[0]

    def enqueue_many(self, events: Iterable[EventLike]) -> list[EnqueueResult]:
        items = [_as_json(e) for e in events]
        return self._post(_encoded({"events": items}, items, single=False))

    def _post(self, body: bytes) -> list[EnqueueResult]:
        """The door's results for ``body``, retried as the class doc says; else its error, raised."""
        attempt, waited_s = 0, 0.0
        while True:
            response = self.client.post("/v1/events", content=body, headers=self.headers)
            if response.is_success:
                return [EnqueueResult.model_validate(r) for r in response.json()["results"]]
            if response.status_code not in TYPED_ANSWERS:
                response.raise_for_status()
            error = error_of(response)
            wait_s = _retry_wait_s(error) if attempt < self.max_retries else None
            if wait_s is None or waited_s + wait_s > self.max_wait_s:
                raise error  # with its retry_after_s, for the caller to decide
            self.sleep(wait_s)
            attempt, waited_s = attempt + 1, waited_s + wait_s

    def close(self) -> None:
        self.client.close()


# the error statuses HttpProducer raises as the SDK's exceptions (producers/sdk/http_door.py); others are httpx's
TYPED_ANSWERS = frozenset({401, 403, 413, 422, 429, 503})
RETRIED_LIMITS = frozenset({"rate_limited", "tenant_rate_limited"})  # 429 codes that waiting frees
MAX_RETRY_AFTER_S = 60  # the longest Retry-After HttpProducer waits by itself (the TypeScript client's)


def _retry_wait_s(error: Exception) -> int | None:
    """The seconds to wait before sending again after ``error``, or None when it is not retried."""
    if isinstance(error, StoreUnavailable):
        wait_s = error.retry_after_s
    elif isinstance(error, OverLimit) and error.what in RETRIED_LIMITS and error.retry_after_s > 0:
        wait_s = error.retry_after_s
    else:
        return None
    return wait_s if wait_s <= MAX_RETRY_AFTER_S else None


def _encoded(body: Any, events: Sequence[dict[str, Any]], *, single: bool) -> bytes:
    """``body`` as the door reads it (compact UTF-8 JSON, no nan or inf); InvalidEvent naming the first field
    JSON has no form for (``payload``, or ``events[i].payload`` in a batch), as the direct Producer names it."""
    try:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    except (TypeError, ValueError, RecursionError) as exc:
        reason = str(exc)
    field = _unencodable_field(events, single=single)
    message = f"{field or 'the event'} must be JSON: {reason}"
    raise InvalidEvent(EventError(code="invalid_field", message=message, field=field))


def _unencodable_field(events: Sequence[dict[str, Any]], *, single: bool) -> str | None:
    """The first top-level field of ``events`` that JSON has no form for (``events[i].`` before it in a batch)."""
    for i, event in enumerate(events):
        for key, value in event.items():
            try:
                json.dumps(value, ensure_ascii=False, allow_nan=False).encode(
                    "utf-8"
                )  # as the body is written
            except (TypeError, ValueError, RecursionError):
                return str(key) if single else f"events[{i}].{key}"
    return None


def _as_json(event: EventLike) -> dict[str, Any]:
    if isinstance(event, SourceEvent):
        return event.model_dump(by_alias=True, exclude_none=True)
    return dict(event)
