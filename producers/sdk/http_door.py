"""The HTTP door as the SDK's clients (:class:`~producers.sdk.producer.HttpProducer`,
:class:`~producers.sdk.session_client.SessionClient`) speak to it: the bearer credential they send, and the
exceptions its error answers become.

The credential goes out as ``Authorization: Bearer <credential>``, and a header value cannot hold a space, a
control character or non-ASCII. httpx refuses such a value only when it sends it, quoting the whole header, the
secret with it (``LocalProtocolError: Illegal header value b'Bearer <secret>\\n'``; a non-ASCII one is a
``UnicodeEncodeError`` holding it). So the clients check it when they are made, with :func:`bearer_token`: the
whitespace around it (the CR of ``"$(cat key.txt)"`` from a CRLF file) is dropped, anything else a header cannot
carry is a ValueError naming where it came from and never quoting it. The CLI's ``--token`` follows the same rule
(producers/cli/reach/target.py).

An error answer becomes the SDK's exception (:func:`error_of`): a 503 is :class:`StoreUnavailable`, a 429
:class:`OverLimit` (as the direct Producer raises a limit), any other :class:`InvalidEvent` naming the field.
"""

from __future__ import annotations

import httpx

from worker.core.errors import OverLimit
from worker.intake.source_event import EventError, InvalidEvent, StoreUnavailable

__all__ = ["DEFAULT_RETRY_AFTER_S", "bearer_headers", "bearer_token", "error_of"]

DEFAULT_RETRY_AFTER_S = 5  # a 503 without a Retry-After in seconds: StoreUnavailable's own default


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


def error_of(response: httpx.Response) -> Exception:
    """The exception for an error answer, with the SDK's types for events: a 503 is :class:`StoreUnavailable`
    (retry after ``retry_after_s``, 5 s without a Retry-After), a 429 is :class:`OverLimit` (``what`` is the
    answer's code, ``quota_exceeded``, ``rate_limited``…; ``retry_after_s`` 0 when waiting does not help), any
    other is :class:`InvalidEvent` naming the field."""
    try:
        error = EventError.model_validate(response.json()["error"])
    except (ValueError, KeyError, TypeError):
        error = EventError(code=f"http_{response.status_code}", message=response.text[:200])
    retry_after = response.headers.get("retry-after", "")
    if response.status_code == 503:
        wait_s = int(retry_after) if retry_after.isdigit() else DEFAULT_RETRY_AFTER_S
        return StoreUnavailable(
            error.message or "the store is unavailable; retry later", retry_after_s=wait_s
        )
    if response.status_code == 429:
        wait_s = int(retry_after) if retry_after.isdigit() else 0
        return OverLimit(error.code, error.message, retry_after_s=wait_s, field=error.field)
    return InvalidEvent(error, status_code=response.status_code)
