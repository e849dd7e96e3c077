"""The ``AgentRunner`` port: how an action asks for an agent run (memory writer, skill management, reviews).

A run request carries LobeHub's operation marker ``{kind, sourceId, anchorMessageId?, triggerMessageId?,
topicId?, agentId?, localDate?, reviewWindow*, originEventId?}``. When the run finishes, the app (or the
reference runner) reports ``agent.execution.completed`` with the ``selfIteration`` payload, its marker echoed;
that is what produces receipts. ``originEventId`` (also the request's own field) is the event that asked for the
run: once its user is erased, the door refuses a completion that names it (policies/self_iteration/origin.py).

* ``TaskRunner`` publishes the request as the plugin task ``agent_signal.agent_run`` (through the engine's
  ``runtime.publish``) that the app — or our worker, with the reference agent — consumes.
* ``WebhookRunner`` POSTs it to a URL, signed per Standard Webhooks (``webhook-id`` = the operation id,
  ``webhook-timestamp``, ``webhook-signature`` over id, timestamp and body: policies/webhook_signing.py),
  retried with exponential backoff and full jitter (tenacity); each attempt is signed at its own time.

Recursion guard (LobeHub's ``suppressSignal``): every request says ``suppressSignal: true``; a run started
by Agent Signal must not feed ``agent.user.message`` back (the planner ignores messages whose ``trigger``
is ``agent_signal``).
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from policies.self_iteration.origin import ORIGIN_FIELD
from policies.webhook_signing import webhook_headers
from worker.plugin import Deadline, deadline_transport, send_within

__all__ = [
    "AGENT_RUN_OUTBOX",
    "AGENT_RUN_TASK",
    "AgentRunner",
    "RunRefused",
    "RunRequest",
    "RunnerError",
    "TaskRunner",
    "WebhookRunner",
]

AGENT_RUN_TASK = "agent_signal.agent_run"
AGENT_RUN_OUTBOX = "agent-run"  # the outbox kind of run requests (delivered by the plugin's deliverer)


class RunnerError(RuntimeError):
    """The run could not be handed over; ``retry_after_s``: when the receiver asked to be called again (its
    ``Retry-After``), else None."""

    def __init__(self, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class RunRefused(RunnerError):
    """The receiver refused the run itself (a 3xx, or a 4xx other than 408 and 429): the outbox stops at once."""


@dataclass(frozen=True)
class RunRequest:
    operation_id: str
    slug: str  # memory-writer | skill-management | nightly-review | self-reflection | self-feedback-intent
    marker: dict[str, Any]
    user_id: str
    agent_id: str | None
    prompt: str
    topic_id: str | None = None
    context: dict[str, Any] = field(default_factory=dict)
    tenant: str = "default"  # whose run: set from the outbox record, never from a handler's payload
    scope_key: str | None = None  # the scope of the event that asked for the run: its completion runs there
    # The event that asked for the run (policies/self_iteration/origin.py): an erasure of its user makes it a
    # tombstone, and the run is dropped. None in a request of before (it then runs as it did).
    origin_event_id: str | None = None

    @property
    def echoed_marker(self) -> dict[str, Any]:
        """The marker a runner echoes back in its completion: its non-empty fields (LobeHub's
        ``readAgentSignalMarker`` keeps no empty string: a feedback's ``topicId: ""`` made a marker whose completion
        the id rule refused, after the run had written), with the origin event when the request has one (the door
        refuses a completion whose origin is a tombstone)."""
        marker = {k: v for k, v in self.marker.items() if v not in (None, "")}
        if not self.origin_event_id:
            return marker
        return {**marker, ORIGIN_FIELD: self.origin_event_id}

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "operationId": self.operation_id,
            "slug": self.slug,
            "marker": self.echoed_marker,
            "userId": self.user_id,
            "agentId": self.agent_id,
            "prompt": self.prompt,
            "topicId": self.topic_id,
            "context": self.context,
            "tenant": self.tenant,
            "scopeKey": self.scope_key,
            ORIGIN_FIELD: self.origin_event_id,
            "trigger": "agent_signal",
            "suppressSignal": True,
            "approvalMode": "headless",
        }

    @classmethod
    def from_json_dict(cls, d: dict[str, Any]) -> RunRequest:
        marker = dict(d["marker"])
        echoed = marker.pop(ORIGIN_FIELD, None)  # the marker as the handler built it, without the echo
        origin = d.get(ORIGIN_FIELD) or echoed
        return cls(
            operation_id=d["operationId"],
            slug=d["slug"],
            marker=marker,
            user_id=d["userId"],
            agent_id=d.get("agentId"),
            prompt=d.get("prompt", ""),
            topic_id=d.get("topicId"),
            context=dict(d.get("context") or {}),
            tenant=str(d.get("tenant") or "default"),
            scope_key=d.get("scopeKey") if isinstance(d.get("scopeKey"), str) else None,
            origin_event_id=origin if isinstance(origin, str) and origin else None,
        )


def operation_id_for(kind: str, source_id: str, *, tenant: str, user_id: str, scope_key: str = "") -> str:
    """Deterministic (LobeHub uses a nanoid), so a redelivered action asks for the same run, and distinct per
    tenant and user: it is the ``webhook-id``/``Idempotency-Key`` a receiver dedupes on and the completion's
    source id, so two tenants' (or two users') runs of one source id must never share it. An action's run passes
    its scope and its idempotency key as ``source_id`` (typed: it names the event's source type), so the runs
    of two events of one user with one ``sourceId`` in two scopes, or under two source types, are two runs too;
    a review's (one per user and guard key, whichever scope asks) passes no scope."""
    parts = (tenant, user_id, kind, source_id, scope_key) if scope_key else (tenant, user_id, kind, source_id)
    return f"agent-signal-{kind}-" + hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16]


class AgentRunner(Protocol):
    def dispatch(self, request: RunRequest) -> str:
        """Hand the run over; returns the operation id. Raises RunnerError."""


class TaskRunner:
    """Publish run requests as the ``agent_signal.agent_run`` task (``queue`` None: the engine's queue)."""

    def __init__(self, publish: Callable[[str, dict[str, Any], str | None], None], queue: str | None) -> None:
        self.publish = publish
        self.queue = queue

    def dispatch(self, request: RunRequest) -> str:
        try:
            self.publish(AGENT_RUN_TASK, request.to_json_dict(), self.queue)
        except Exception as exc:
            raise RunnerError(f"could not publish the agent run: {exc}") from exc
        return request.operation_id


class WebhookRunner:
    def __init__(
        self,
        url: str,
        secret: str,
        *,
        previous_secrets: Sequence[str] = (),
        attempts: int = 3,
        base_delay_s: float = 0.2,
        timeout_s: float = 10.0,
    ) -> None:
        self.url = url
        self.secret = secret
        self.previous_secrets = tuple(
            previous_secrets
        )  # a rotation under way: each delivery signed with these too
        self.attempts = attempts
        self.base_delay_s = base_delay_s
        self.timeout_s = timeout_s

    def dispatch(self, request: RunRequest) -> str:
        body = json.dumps(request.to_json_dict(), separators=(",", ":")).encode()
        # The receiver dedupes on the operation id (Idempotency-Key and webhook-id): a request can arrive more
        # than once (the outbox is at least once).
        headers = {"content-type": "application/json", "idempotency-key": request.operation_id}
        retrying = Retrying(
            stop=stop_after_attempt(self.attempts),
            wait=wait_random_exponential(multiplier=self.base_delay_s, max=30),
            retry=retry_if_exception(_retry_now),
            reraise=True,
        )
        try:
            for attempt in retrying:
                with attempt:
                    signed = headers | webhook_headers(
                        self.secret, request.operation_id, body, previous_secrets=self.previous_secrets
                    )
                    response = self._post(body, signed)
                    if response.status_code >= 300:
                        raise _HttpStatus(response.status_code, _retry_after_s(response))
        except _HttpStatus as exc:
            if not _transient(exc):  # the receiver refused the request itself: sending it again cannot help
                raise RunRefused(f"the agent-run webhook refused the run: HTTP {exc.status_code}") from None
            asked = f" (Retry-After {exc.retry_after_s:g} s)" if exc.retry_after_s is not None else ""
            message = f"the agent-run webhook failed: HTTP {exc.status_code}{asked}"
            raise RunnerError(message, retry_after_s=exc.retry_after_s) from None
        except httpx.HTTPError as exc:
            raise RunnerError(
                f"the agent-run webhook failed after {self.attempts} attempts: {type(exc).__name__}"
            ) from None
        return request.operation_id

    def _post(self, body: bytes, headers: dict[str, str]) -> httpx.Response:
        """One attempt, the whole answer within ``timeout_s``: httpx's own timeout caps each read, so a receiver
        that trickled its answer held the delivery (and its tenant's share of the relay) for as long as it liked
        (a fault audit). A late answer is an ``httpx.TimeoutException``, retried as any transport error."""
        deadline = Deadline(self.timeout_s)
        with httpx.Client(transport=deadline_transport(self.url), timeout=self.timeout_s) as client:
            request = client.build_request("POST", self.url, content=body, headers=headers)
            with deadline.applied():
                response = send_within(client, request, deadline)
                response.read()
            return response


class _HttpStatus(Exception):
    def __init__(self, status_code: int, retry_after_s: float | None = None) -> None:
        super().__init__(f"HTTP {status_code}")
        self.status_code = status_code
        self.retry_after_s = retry_after_s


def _retry_after_s(response: httpx.Response) -> float | None:
    """A 429's or 503's ``Retry-After`` in seconds (a number of seconds, or an HTTP date), else None."""
    if response.status_code not in (429, 503):
        return None
    value = response.headers.get("retry-after", "").strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - time.time())


def _retry_now(exc: BaseException) -> bool:
    """Tried again at once (inside one outbox attempt): what :func:`_transient` retries, unless the receiver
    said when (``Retry-After``): then the outbox's next attempt waits that long (worker/outbox/relay.py), where
    three quick retries made a receiver that throttles dead in a minute or two."""
    return _transient(exc) and not (isinstance(exc, _HttpStatus) and exc.retry_after_s is not None)


def _transient(exc: BaseException) -> bool:
    """Retry transport errors, 408, 429 and 5xx; a 3xx or another 4xx means the receiver refused the request itself
    (a redirect is not followed: it could point the signed run anywhere)."""
    if isinstance(exc, _HttpStatus):
        return exc.status_code in (408, 429) or exc.status_code >= 500
    return isinstance(exc, httpx.HTTPError)
