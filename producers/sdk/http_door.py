"""The HTTP door as the SDK's clients (:class:`~producers.sdk.producer.HttpProducer`,
:class:`~producers.sdk.session_client.SessionClient`) speak to it: the URL and the bearer credential they send,
and the exceptions the door's answers become (a call's deadline: worker/outbox/deadline.py).

**URL.** :func:`door_url` refuses a base URL holding a user name or password (the TypeScript client refuses it
too): httpx would send it as Basic auth next to the bearer credential, and every error that quotes the URL
(``raise_for_status``) would carry the password. The error never quotes the URL.

**Credential.** It goes out as ``Authorization: Bearer <credential>``, and a header value cannot hold a space, a
control character or non-ASCII. httpx refuses such a value only when it sends it, quoting the whole header, the
secret with it (``LocalProtocolError: Illegal header value b'Bearer <secret>\\n'``; a non-ASCII one is a
``UnicodeEncodeError`` holding it). So the clients check it when they are made, with :func:`bearer_token`: the
whitespace around it (the CR of ``"$(cat key.txt)"`` from a CRLF file) is dropped, anything else a header cannot
carry is a ValueError naming where it came from and never quoting it. The CLI's ``--token`` follows the same rule
(producers/cli/reach/target.py).

**Answers.** An error answer becomes the SDK's exception (:func:`error_of`): a 503, and a gateway's 502 or 504,
are :class:`StoreUnavailable`, a 429 :class:`OverLimit` (as the direct Producer raises a limit), a 401 or 403
:class:`CredentialRefused` (an :class:`InvalidEvent`), any other :class:`InvalidEvent` naming the field; Retry-After is read in seconds or as an HTTP date (:func:`retry_after_s`).
A success answer that is not what the route answers (no JSON object, a field missing) is
:class:`UnexpectedAnswer`; no answer at all, once the retries are spent, is :class:`NoAnswer`.
"""

from __future__ import annotations

import email.utils
import math
import re
from datetime import UTC, datetime
from typing import Any

import httpx

from worker.core.errors import OverLimit
from worker.intake.refusals import EventError, InvalidEvent, StoreUnavailable

__all__ = [
    "DEFAULT_RETRY_AFTER_S",
    "NOTHING_SENT",
    "CredentialRefused",
    "NoAnswer",
    "UnexpectedAnswer",
    "bearer_headers",
    "bearer_token",
    "check_client_url",
    "door_url",
    "error_code",
    "error_of",
    "json_object",
    "origin",
    "retry_after_s",
    "unexpected_answer",
]

DEFAULT_RETRY_AFTER_S = 5  # a 503 without a Retry-After in seconds: StoreUnavailable's own default
GATEWAY_STATUSES = frozenset({502, 504})  # a proxy in front of the door: the door is gone or too slow
# transport failures before any byte of the request left: nothing can have been stored
NOTHING_SENT: tuple[type[httpx.TransportError], ...] = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    httpx.ProxyError,  # the proxy refused the tunnel (a 407, a door it cannot reach): nothing reached the door
)
_SECONDS = re.compile(r"\d+(\.\d+)?")


class CredentialRefused(InvalidEvent):
    """The door refused the call's credential (401: unknown, revoked or expired) or its role (403), not an event
    of it: every later call fails the same way until the credential changes. An :class:`InvalidEvent`, as before
    it had a type of its own, so catch it first where ``except InvalidEvent`` skips the event at fault (after a
    key rotation that would skip every event)."""


class NoAnswer(StoreUnavailable):
    """The door gave no answer, the retries spent: it could not be reached, or the call's deadline passed.
    ``timed_out``: the deadline passed with a request on its way. ``maybe_stored``: a request may have reached the
    door (anything but a refused connection), so its events may be stored: sending them again is safe, those
    answer ``duplicate``. ``__cause__`` is the last httpx error."""

    def __init__(self, message: str, *, timed_out: bool, maybe_stored: bool) -> None:
        super().__init__(message, retry_after_s=DEFAULT_RETRY_AFTER_S)
        self.timed_out = timed_out
        self.maybe_stored = maybe_stored


class UnexpectedAnswer(Exception):
    """A success answer that is not what the route answers (not JSON, not an object, a field missing or of
    another kind): a proxy's page, or another service at that URL. ``status_code``: the answer's, when known."""

    def __init__(self, answer: str, where: str = "", status_code: int | None = None) -> None:
        super().__init__(f"{where} {answer}; is that the Agent Signal API?".lstrip())
        self.answer = answer  # what came back, e.g. "POST /v1/events answered 200 without {…}"
        self.status_code = status_code


def bearer_token(token: str | None, source: str = "token") -> str | None:
    """``token`` without the whitespace around it (None when nothing is left); a ValueError naming ``source``,
    never quoting the secret, when it holds a space, a control character or non-ASCII."""
    if token is None:
        return None
    stripped = token.strip()
    if any(not "!" <= char <= "~" for char in stripped):
        raise ValueError(
            f"{source} holds a space, a control character or a non-ASCII character, which a bearer credential "
            "cannot carry (the value is not shown)"
        )
    return stripped or None


def bearer_headers(token: str | None) -> dict[str, str]:
    """The ``Authorization`` header of a checked credential (none without one)."""
    return {"Authorization": f"Bearer {token}"} if token else {}


def door_url(url: str) -> str:
    """``url`` without a trailing slash when it is an http(s) URL with a host and no user name or password; else
    a ValueError that does not quote it (it may hold a password)."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL:
        raise ValueError("url is not a valid URL (not shown); give http://HOST:PORT") from None
    _check_parsed(parsed, "url")
    return url.rstrip("/")


def check_client_url(client: httpx.Client) -> None:
    """A client given as ``client=`` must have a base URL (it replaces ``url``), with no user name or password."""
    if not str(client.base_url):
        raise ValueError("client has no base_url: give one (it replaces url), or pass no client")
    _check_parsed(client.base_url, "client.base_url")


def _check_parsed(parsed: httpx.URL, source: str) -> None:
    if parsed.userinfo:
        raise ValueError(
            f"{source} holds a user name or password, which errors would show: give the credential as token= "
            "(the URL is not shown)"
        )
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ValueError(
            f"{source} must be an http:// or https:// URL with a host, e.g. http://127.0.0.1:8000"
        )


def origin(url: httpx.URL) -> str:
    """``scheme://host[:port]`` of ``url``, for messages (never a user name or password)."""
    host = f"[{url.host}]" if ":" in url.host else url.host
    return f"{url.scheme}://{host}" + (f":{url.port}" if url.port else "")


def retry_after_s(response: httpx.Response, now: datetime | None = None) -> int | None:
    """The answer's Retry-After in whole seconds (rounded up): a number of seconds, or an HTTP date (0 when it has
    passed); None when there is none or it cannot be read."""
    text = response.headers.get("retry-after", "").strip()
    if _SECONDS.fullmatch(text):
        return math.ceil(float(text))
    try:
        at = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if at.tzinfo is None:  # "-0000": UTC, with no claim about the sender's zone
        at = at.replace(tzinfo=UTC)
    return max(0, math.ceil((at - (now or datetime.now(UTC))).total_seconds()))


def error_of(response: httpx.Response) -> Exception:
    """The exception for an error answer, with the SDK's types for events: a 503, 502 or 504 is
    :class:`StoreUnavailable` (retry after ``retry_after_s``, 5 s without a Retry-After), a 429 is
    :class:`OverLimit` (``what`` is the answer's code, ``quota_exceeded``, ``rate_limited``…; ``retry_after_s`` 0
    when waiting does not help), any other is :class:`InvalidEvent` naming the field."""
    try:
        error = EventError.model_validate(response.json()["error"])
    except (ValueError, KeyError, TypeError):
        error = EventError(code=f"http_{response.status_code}", message=response.text[:200])
    wait_s = retry_after_s(response)
    if response.status_code == 503:
        message = error.message or "the store is unavailable; retry later"
        return StoreUnavailable(message, retry_after_s=DEFAULT_RETRY_AFTER_S if wait_s is None else wait_s)
    if response.status_code in GATEWAY_STATUSES:
        message = f"a gateway answered {response.status_code} {response.reason_phrase}: the door is down or too slow; retry later"
        return StoreUnavailable(message, retry_after_s=DEFAULT_RETRY_AFTER_S if wait_s is None else wait_s)
    if response.status_code == 429:
        return OverLimit(error.code, error.message, retry_after_s=wait_s or 0, field=error.field)
    if response.status_code in (401, 403):
        return CredentialRefused(error, status_code=response.status_code)
    return InvalidEvent(error, status_code=response.status_code)


def error_code(response: httpx.Response) -> str | None:
    """The ``error.code`` of an answer's JSON body (the door's error object), if it has one."""
    try:
        body = response.json()
    except ValueError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    return str(error.get("code")) if isinstance(error, dict) else None


def json_object(response: httpx.Response, expected: str) -> dict[str, Any]:
    """The answer's JSON object; :class:`UnexpectedAnswer` saying it lacks ``expected`` when it has none."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise unexpected_answer(response, expected)
    return body


def unexpected_answer(response: httpx.Response, expected: str) -> UnexpectedAnswer:
    """``http://host:port POST /v1/events answered 200 without {…}; is that the Agent Signal API?``"""
    request = response.request
    answer = f"{request.method} {request.url.path} answered {response.status_code} without {expected}"
    return UnexpectedAnswer(answer, origin(request.url), response.status_code)
