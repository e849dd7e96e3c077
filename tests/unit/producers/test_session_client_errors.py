"""SessionClient maps the door's error answers as HttpProducer does (no server needed): a 503 is StoreUnavailable
and a 429 is OverLimit, both keeping Retry-After; a 4xx validation error stays InvalidEvent naming the field."""

from __future__ import annotations

import httpx
import pytest

from producers import InvalidEvent, OverLimit, SessionClient, StoreUnavailable


def _client(response: httpx.Response) -> SessionClient:
    transport = httpx.MockTransport(lambda _: response)
    return SessionClient(client=httpx.Client(base_url="http://door", transport=transport))


def _error(code: str, message: str, field: str | None = None) -> dict[str, object]:
    return {"error": {"code": code, "message": message, "field": field}}


def test_store_unavailable_keeps_retry_after() -> None:
    """A 503 store_unavailable raises StoreUnavailable with the door's message and Retry-After."""
    body = _error("store_unavailable", "the store is unavailable (OOM); retry later")
    client = _client(httpx.Response(503, json=body, headers={"Retry-After": "7"}))
    with pytest.raises(StoreUnavailable, match="OOM") as raised:
        client.signal("s1", "progress")
    assert raised.value.retry_after_s == 7 and raised.value.status_code == 503


def test_any_503_is_store_unavailable() -> None:
    """A 503 without a JSON body (a proxy) or Retry-After is StoreUnavailable too, retry in 5 s."""
    with pytest.raises(StoreUnavailable) as raised:
        _client(httpx.Response(503, text="upstream down")).configure("s1", dmailEnabled=True)
    assert raised.value.retry_after_s == 5


def test_quota_is_over_limit_with_retry_after() -> None:
    """A 429 quota_exceeded raises OverLimit: its code as ``what``, its message, and Retry-After (0 without)."""
    body = _error("quota_exceeded", "user u1 stores 1048576 bytes (quota 1048576)")
    client = _client(httpx.Response(429, json=body, headers={"Retry-After": "30"}))
    with pytest.raises(OverLimit) as raised:
        client.activate("s1", "approval")
    assert (raised.value.what, raised.value.retry_after_s) == ("quota_exceeded", 30)
    assert raised.value.message.startswith("user u1 stores")
    with pytest.raises(OverLimit) as raised:
        _client(httpx.Response(429, json=_error("rate_limited", "over the key's rate"))).state("s1")
    assert raised.value.retry_after_s == 0


def test_validation_errors_stay_invalid_event() -> None:
    """A 422 is InvalidEvent naming the field, as before."""
    client = _client(httpx.Response(422, json=_error("invalid_field", "unknown type", "type")))
    with pytest.raises(InvalidEvent) as raised:
        client.signal("s1", "nope")
    assert raised.value.error.field == "type" and raised.value.status_code == 422


@pytest.mark.parametrize("session_id", [".", "..", "s1/..", "x/../victim", "s1\n", ""])
def test_a_dot_segment_session_id_is_refused_before_any_request(session_id: str) -> None:
    """``context('.')`` read the settings of the session named ``context``, and ``context('x/../victim')``
    victim's context: the URL resolved the dots away. The SDK checks the door's whole id rule first."""
    sent: list[httpx.Request] = []
    transport = httpx.MockTransport(lambda request: sent.append(request) or httpx.Response(200, json={}))
    client = SessionClient(client=httpx.Client(transport=transport, base_url="http://door"))
    with pytest.raises(InvalidEvent) as refused:
        client.context(session_id)
    assert refused.value.error.field == "sessionId" and sent == []


@pytest.mark.parametrize("token", ["as_secret_0123456789", " as_secret_0123456789\r\n"])
def test_the_token_is_sent_on_a_client_given_to_it(token: str) -> None:
    """``SessionClient(token=T, client=c)`` sends ``Bearer T`` (stripped) on every call; the token was dropped
    when a client was given (a 401 from the door). The given client's own headers are left as they were."""
    sent: list[httpx.Request] = []
    transport = httpx.MockTransport(lambda request: sent.append(request) or httpx.Response(200, json={}))
    given = httpx.Client(transport=transport, base_url="http://door")
    client = SessionClient("http://door", token=token, client=given)
    client.context("s1")
    client.state("s1")
    assert [r.headers.get("authorization") for r in sent] == ["Bearer as_secret_0123456789"] * 2
    assert "authorization" not in given.headers
