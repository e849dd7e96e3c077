"""The Python SDK's HTTP clients (``HttpProducer``, ``SessionClient``) against a real ``agent-signal web``.

* The credential: a key read from a CRLF file (``"$(cat key.txt)"``) is sent without its newline instead of
  failing with httpx's "Illegal header value b'Bearer <the key>\\r\\n'"; a ``SessionClient`` given its own httpx
  client still sends its token (it was dropped: 401).
* The door's rate limit is the SDK's ``OverLimit`` (with ``retry_after_s``), not a bare ``HTTPStatusError``; with
  ``max_retries`` the same call waits the answer's Retry-After and goes through.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from producers import HttpProducer, OverLimit, SessionClient

pytestmark = pytest.mark.integration

KEY = "as_bootstrap_" + "s" * 24
TRIES = 50  # requests sent until the door's 1/s rate refuses one (the second almost always is)


def _event(source_id: str) -> dict[str, Any]:
    return {"sourceType": "test.timeline", "sourceId": source_id, "scopeKey": "topic:sdk", "payload": {}}


def test_a_token_with_a_trailing_newline_is_sent_without_it(make_settings: Any, start_web: Any) -> None:
    """``token=KEY + "\\r\\n"`` (a key read from a CRLF file) reaches the door as ``Bearer KEY``, for both clients."""
    _, url = start_web(make_settings(bootstrap_key=KEY))
    producer = HttpProducer(url, token=KEY + "\r\n")
    assert producer.enqueue(_event("crlf-1")).status == "accepted"
    producer.close()
    sessions = SessionClient(url, token=f"  {KEY}\n")
    assert sessions.configure("sdk-crlf", dmailEnabled=True)["dmailEnabled"] is True
    sessions.close()


def test_a_session_client_given_a_client_still_sends_its_token(make_settings: Any, start_web: Any) -> None:
    """``SessionClient(url, token=T, client=c)`` authenticates with T (the token was dropped: a 401)."""
    _, url = start_web(make_settings(bootstrap_key=KEY))
    with httpx.Client(base_url=url) as own:
        sessions = SessionClient(url, token=KEY, client=own)
        assert sessions.configure("sdk-own-client", dmailEnabled=True)["dmailEnabled"] is True
        assert sessions.context("sdk-own-client")["messages"] == []


def test_the_door_rate_limit_is_over_limit_and_retried_after_its_wait(
    make_settings: Any, start_web: Any
) -> None:
    """Over the credential's rate the door answers 429 ``rate_limited``: ``OverLimit`` with the answer's
    Retry-After without retries; with ``max_retries`` the call waits that long and is accepted."""
    _, url = start_web(make_settings(bootstrap_key=KEY, rate_limit_per_s=1))
    once = HttpProducer(url, token=KEY, max_retries=0)
    with pytest.raises(OverLimit) as refused:
        for n in range(TRIES):
            once.enqueue(_event(f"rate-{n}"))
    assert refused.value.what == "rate_limited" and refused.value.retry_after_s >= 1
    once.close()
    statuses: list[int] = []
    hooks = {"response": [lambda response: statuses.append(response.status_code)]}
    patient = HttpProducer(url, token=KEY, client=httpx.Client(base_url=url, event_hooks=hooks))
    for n in range(TRIES):  # until one call met a 429: it waited and was sent again
        assert patient.enqueue(_event(f"patient-{n}")).status == "accepted"
        if 429 in statuses:
            break
    assert 429 in statuses and statuses[-1] == 202
    patient.close()
