"""The Python SDK: ``Producer.enqueue(event)`` / ``enqueue_many(events)``, straight to Redis and the broker,
and ``HttpProducer`` with the same two methods over ``POST /v1/events``.

Both validate first and enqueue nothing from a batch with an invalid event; both raise
:class:`~worker.intake.source_event.StoreUnavailable` when the store refuses a batch (none of it stored) or cannot be reached,
and :class:`~worker.core.errors.OverLimit` for a limit (``HttpProducer`` retries a rate limit, a 502, 503 or 504
and a request without an answer first, within one deadline per call). Both close with ``with … as``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn
from urllib.parse import quote

import httpx
import tenacity
from opentelemetry import trace
from pydantic import ValidationError
from tenacity.stop import stop_base

from producers.sdk.http_door import (
    NOTHING_SENT,
    NoAnswer,
    bearer_headers,
    bearer_token,
    check_client_url,
    door_url,
    error_code,
    error_of,
    json_object,
    origin,
    retry_after_s,
    unexpected_answer,
)
from worker.chain.context import Deps
from worker.core.errors import OverLimit
from worker.core.tenancy import DEFAULT_TENANT, check_tenant
from worker.intake.emitter import NOT_TEXT, EventLike
from worker.intake.json_paths import unencodable
from worker.intake.source_event import (
    EnqueueResult,
    EventError,
    InvalidEvent,
    SourceEvent,
    StoreUnavailable,
    as_single,
    field_error,
    with_traceparent,
)
from worker.keys.layout import Keys
from worker.outbox.deadline import Deadline, deadline_transport, send_within
from worker.plugin import PluginRuntime
from worker.runtime.assembly import assemble, load_plugins
from worker.settings import Settings
from worker.store.events import EventStore, PreparedEvent
from worker.store.server.client import redis_from_settings
from worker.telemetry.recorder import DISABLED, Telemetry, record_error

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
        try:
            return self.enqueue_prepared(prepared)[0]
        except (
            InvalidEvent
        ) as exc:  # the store's refusal of it (another user's dedupe key), named as one event's
            raise as_single(exc) from None

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
                record_error(span, exc)
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

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class HttpProducer:
    """The same SDK over HTTP (``POST /v1/events``), for apps that do not reach Redis, with the direct
    :class:`Producer`'s errors: :class:`InvalidEvent` for an event the door refuses (401, 403, 413, 422), and for
    what the direct Producer refuses before sending (an event that is not an object names ``events[i]``, a key that
    is not a string its field; a datetime, bytes, a set, a nan or a lone surrogate in a payload names ``payload``
    or ``events[i].payload``); :class:`OverLimit` for a 429 and :class:`StoreUnavailable` for a 503 (or a gateway's
    502 or 504), both with ``retry_after_s``; :class:`~producers.sdk.http_door.NoAnswer`, a StoreUnavailable, when
    the door cannot be reached or does not answer in time; :class:`~producers.sdk.http_door.UnexpectedAnswer` for
    a success that is not the door's (``{"results": [...]}``, one per event). Another error answer is httpx's
    ``HTTPStatusError``. ``enqueue_many([])`` sends nothing and answers ``[]``.

    **Time.** ``timeout_s`` (default 30 s) is one call's deadline, its attempts and the waits between them
    together: each attempt gets the time left, and a server that trickles its answer is cut off there
    (``NoAnswer`` with ``timed_out``). A web handler calling it blocks about ``timeout_s`` at most.

    **Retries.** Sending again is safe: the door dedupes events by source id, so what an attempt whose answer was
    lost stored answers ``duplicate``. A 503, 502 or 504 and a request that got no answer (refused, dropped, timed
    out) are sent again after the answer's Retry-After (seconds or an HTTP date), or, without one or with 0, after
    an exponential backoff with jitter (0.5-1 s, 1-1.5 s, 2-2.5 s… at most 8 s); a 429 ``rate_limited`` or
    ``tenant_rate_limited`` after its Retry-After. At most ``max_retries`` times, while the waits add up to at most
    ``max_wait_s`` (0 turns waiting off) and end before the deadline; a Retry-After over 60 s is not waited for.
    A 429 without Retry-After (a quota) or of another limit is raised at once, with its ``retry_after_s``.

    ``token`` is checked here and ``url`` too: a user name or password in it is a ValueError
    (producers/sdk/http_door.py). ``client`` replaces the httpx client: the token is sent on every request,
    whichever client; its timeouts are capped by the time left, but its transport is its own (a trickling server
    is cut off at its read timeout, not the deadline). ``with HttpProducer(...) as producer:`` closes it."""

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
        if not 0 < timeout_s < float("inf"):
            raise ValueError(f"timeout_s is {timeout_s}; give the seconds a call may take in all (above 0)")
        if client is not None:
            check_client_url(client)
        token = bearer_token(token)
        self.has_token = token is not None
        self.headers = {**bearer_headers(token), "Content-Type": "application/json"}
        self.max_retries = max_retries
        self.max_wait_s = max_wait_s
        self.timeout_s = timeout_s
        self.client = client or httpx.Client(
            base_url=door_url(url), timeout=timeout_s, transport=deadline_transport(door_url(url))
        )
        self.sleep: Callable[[float], None] = time.sleep  # the wait before a retry (tests record it)
        # 0.5 s, 1, 2, 4, then 8 at most, each plus up to 0.5 s of jitter
        self.backoff = tenacity.wait_exponential(
            multiplier=BACKOFF_INITIAL_S, max=BACKOFF_MAX_S
        ) + tenacity.wait_random(0, BACKOFF_INITIAL_S)

    def __enter__(self) -> HttpProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def enqueue(self, event: EventLike) -> EnqueueResult:
        item = _as_json(event, prefix="")
        return self._post(_encoded(item, [item], single=True), count=1)[0]

    def enqueue_many(self, events: Iterable[EventLike]) -> list[EnqueueResult]:
        items = [_as_json(e, prefix=f"events[{i}]") for i, e in enumerate(events)]
        if not items:
            return []
        return self._post(_encoded({"events": items}, items, single=False), count=len(items))

    def status(self, event_id: str) -> dict[str, Any] | None:
        """The event's status record, as the direct :meth:`Producer.status` (``GET /v1/events/{eventId}``: its
        status, attempts, receipts…), or None when the tenant has no such event. A source id that names one event
        answers it too (two users' answer 409: :class:`InvalidEvent`). One attempt within ``timeout_s`` (a read
        is safe to ask again); its errors are the enqueue's: :class:`NoAnswer`, :class:`InvalidEvent` (401, 403),
        :class:`OverLimit`, :class:`StoreUnavailable`, :class:`UnexpectedAnswer` for a success that is no JSON
        object or a 404 that is not the door's, else httpx's ``HTTPStatusError``."""
        call = _Call(b"", 0, Deadline(self.timeout_s))
        # "." and ".." are ids too, which a URL would read as its own path segments (SessionClient's artifacts too)
        segment = event_id.replace(".", "%2E") if event_id in (".", "..") else quote(event_id, safe="")
        path = f"/v1/events/{segment}"
        request = self.client.build_request("GET", path, headers=self.headers)
        try:
            with call.deadline.applied():
                response = send_within(self.client, request, call.deadline)
        except httpx.TransportError as exc:
            raise self._no_answer(call, exc) from exc
        if (
            response.status_code == 404
        ):  # the door's not_found, else a page of another server, or no such route
            if error_code(response) == "not_found":
                return None
            raise unexpected_answer(response, "the door's error object")
        if response.is_success:
            record = json_object(response, "an event's status record")
            if "status" not in record:
                raise unexpected_answer(response, "'status'")
            return record
        if response.status_code not in (*TYPED_ANSWERS, 409):
            response.raise_for_status()
        raise error_of(response)

    def _post(self, body: bytes, *, count: int) -> list[EnqueueResult]:
        """The door's results for ``body`` (``count`` events), retried as the class doc says; else its error."""
        call = _Call(body, count, Deadline(self.timeout_s))
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(_Again),
            wait=self._wait_s,
            stop=tenacity.stop_after_attempt(self.max_retries + 1)
            | _OverBudget(self.max_wait_s, call.deadline),
            sleep=self.sleep,
            reraise=True,
        )
        try:
            with call.deadline.applied():
                return retrying(self._attempt, call)
        except _Again as spent:  # the retries are spent, or the next wait would pass a bound
            raise spent.error from spent.error.__cause__

    def _attempt(self, call: _Call) -> list[EnqueueResult]:
        """One request: the results, or :class:`_Again` for a failure worth another, or the error."""
        request = self.client.build_request("POST", "/v1/events", content=call.body, headers=self.headers)
        try:
            response = send_within(self.client, request, call.deadline)
        except NOTHING_SENT as exc:
            raise _Again(self._no_answer(call, exc)) from exc
        except RETRIED_TRANSPORT as exc:  # the request may have reached the door
            call.maybe_stored = True
            raise _Again(self._no_answer(call, exc)) from exc
        if response.is_success:
            return _results(response, call.count)
        if response.status_code not in TYPED_ANSWERS:
            response.raise_for_status()
        error = error_of(response)
        raise _retry_of(response, error) or error

    def _no_answer(self, call: _Call, exc: httpx.TransportError) -> NoAnswer:
        where = origin(self.client.base_url)
        # the deadline passed, whatever the phase (a connect the deadline cut short is no unreachable door)
        deadline_passed = (
            isinstance(exc, httpx.TimeoutException) and call.deadline.left_s() <= DEADLINE_SLACK_S
        )
        timed_out = deadline_passed or (
            isinstance(exc, httpx.TimeoutException) and not isinstance(exc, NOTHING_SENT)
        )
        if deadline_passed:
            message = f"no answer from {where} within {self.timeout_s:g} s"
        elif timed_out:  # a given client's own read or write timeout, before the deadline
            message = f"no answer from {where} ({_reason(exc)})"
        else:
            message = f"cannot reach {where} ({_reason(exc)})"
        if call.maybe_stored:
            message += "; the events may be stored: sending them again is safe (those answer duplicate)"
        error = NoAnswer(message, timed_out=timed_out, maybe_stored=call.maybe_stored)
        error.__cause__ = exc  # raised as the call's error once the retries are spent
        return error

    def _wait_s(self, state: tenacity.RetryCallState) -> float:
        """The answer's Retry-After, else the backoff."""
        failure = state.outcome.exception() if state.outcome is not None else None
        asked_s = failure.wait_s if isinstance(failure, _Again) else None
        return float(asked_s) if asked_s else float(self.backoff(state))

    def close(self) -> None:
        self.client.close()


# the error statuses HttpProducer raises as the SDK's exceptions (producers/sdk/http_door.py); others are httpx's
TYPED_ANSWERS = frozenset({401, 403, 413, 422, 429, 502, 503, 504})
RETRIED_LIMITS = frozenset({"rate_limited", "tenant_rate_limited"})  # 429 codes that waiting frees
MAX_RETRY_AFTER_S = 60  # the longest Retry-After HttpProducer waits by itself (the TypeScript client's)
BACKOFF_INITIAL_S = 0.5  # the first backoff, doubled each attempt, plus up to this much jitter
BACKOFF_MAX_S = 8.0
DEADLINE_SLACK_S = 0.05  # a timeout this close to the deadline is the deadline's (a socket's timer is coarse)
# failures after the request may have left (NOTHING_SENT, caught first, are before): retried, the door dedupes
RETRIED_TRANSPORT = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


@dataclass
class _Call:
    """One ``_post``: its body and event count, its deadline, and whether an attempt may have reached the door."""

    body: bytes
    count: int
    deadline: Deadline
    maybe_stored: bool = False


class _OverBudget(stop_base):
    """Stop when the next wait would take the waits past ``max_wait_s`` in all, or end at or after the deadline."""

    def __init__(self, max_wait_s: float, deadline: Deadline) -> None:
        self.max_wait_s = max_wait_s
        self.deadline = deadline

    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        upcoming_s = retry_state.upcoming_sleep
        return retry_state.idle_for + upcoming_s > self.max_wait_s or upcoming_s >= self.deadline.left_s()


class _Again(Exception):
    """An attempt's ``error`` worth sending again after ``wait_s`` (None: the backoff)."""

    def __init__(self, error: Exception, wait_s: int | None = None) -> None:
        super().__init__(str(error))
        self.error = error
        self.wait_s = wait_s


def _retry_of(response: httpx.Response, error: Exception) -> _Again | None:
    """The retry an error answer calls for, or None when it is not retried (the class doc)."""
    asked_s = retry_after_s(response)
    if asked_s is not None and asked_s > MAX_RETRY_AFTER_S:
        return None
    if isinstance(error, StoreUnavailable):  # 503, 502, 504
        return _Again(error, asked_s or None)
    if isinstance(error, OverLimit) and error.what in RETRIED_LIMITS and asked_s:
        return _Again(error, asked_s)
    return None


def _reason(exc: httpx.TransportError) -> str:
    """A few words for why a request got no answer (httpx's words for a connection are the OS's)."""
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


def _results(response: httpx.Response, count: int) -> list[EnqueueResult]:
    """The ``count`` results of a success answer; :class:`UnexpectedAnswer` when it holds no such list."""
    expected = '{"results": [...]} with ' + (f"{count} results" if count != 1 else "1 result")
    results = json_object(response, expected).get("results")
    if not isinstance(results, list) or len(results) != count:
        raise unexpected_answer(response, expected)
    try:
        return [EnqueueResult.model_validate(r) for r in results]
    except ValidationError:
        raise unexpected_answer(response, expected) from None


def _encoded(body: Any, events: Sequence[dict[str, Any]], *, single: bool) -> bytes:
    """``body`` as the door reads it (compact UTF-8 JSON, no nan or inf); InvalidEvent naming the first field
    JSON has no form for (``payload``, or ``events[i].payload`` in a batch), as the direct Producer names it."""
    try:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: json writes it, UTF-8 cannot
        problem = NOT_TEXT
    except (TypeError, ValueError, RecursionError) as exc:
        problem = f"must be JSON: {exc}"
    field, message = _unencodable_field(events, single=single, problem=problem)
    raise InvalidEvent(EventError(code="invalid_field", message=message, field=field))


def _unencodable_field(
    events: Sequence[dict[str, Any]], *, single: bool, problem: str
) -> tuple[str | None, str]:
    """(field, message) for the first value of ``events`` that JSON has no form for, by its path where one value
    is to blame (``payload.score``; ``events[i].`` before it in a batch), as the door and the direct Producer
    name it; else the top-level field, or none."""
    for i, event in enumerate(events):
        for key, value in event.items():
            try:
                json.dumps(value, ensure_ascii=False, allow_nan=False).encode(
                    "utf-8"
                )  # as the body is written
            except (TypeError, ValueError, RecursionError):
                top = str(key) if single else f"events[{i}].{key}"
                return unencodable(value, top) or (top, f"{top} {problem}")
    return None, f"the event {problem}"


def _as_json(event: object, *, prefix: str) -> dict[str, Any]:
    """``event`` as the JSON object to send; InvalidEvent, as the direct Producer raises it, for what is not an
    object or holds a key that is not a string (JSON would send ``1`` as ``"1"``)."""
    if isinstance(event, SourceEvent):
        return event.model_dump(by_alias=True, exclude_none=True)
    if not isinstance(event, Mapping):
        error = EventError(
            code="invalid_type", message="an event must be a JSON object", field=prefix or None
        )
        raise InvalidEvent(error)
    item = dict(event)
    payload = item.get("payload")
    if not _str_keys(item) or (isinstance(payload, Mapping) and not _str_keys(payload)):
        _refuse_as_sent(item, prefix)
    return item


def _str_keys(mapping: Mapping[Any, Any]) -> bool:
    return all(isinstance(key, str) for key in mapping)


def _refuse_as_sent(item: dict[str, Any], prefix: str) -> NoReturn:
    """The direct Producer's error for an event with a key that is not a string (the SourceEvent model's)."""
    try:
        SourceEvent.model_validate(item)
    except ValidationError as exc:
        raise InvalidEvent(field_error(exc, prefix)) from None
    field = f"{prefix}.payload" if prefix else "payload"  # pragma: no cover - the model refuses such keys
    raise InvalidEvent(
        EventError(code="invalid_field", message=f"{field}: keys must be strings", field=field)
    )
