"""HttpProducer maps the door's 503 store_unavailable to the SDK's StoreUnavailable (no server needed)."""

from __future__ import annotations

import httpx
import pytest

from producers import HttpProducer, StoreUnavailable

EVENT = {"sourceType": "test.timeline", "sourceId": "s1", "scopeKey": "topic:a", "payload": {}}


def _producer(response: httpx.Response) -> HttpProducer:
    producer = HttpProducer("http://door")
    producer.client = httpx.Client(base_url="http://door", transport=httpx.MockTransport(lambda _: response))
    return producer


def test_store_unavailable_is_typed_with_retry_after() -> None:
    """A 503 store_unavailable raises StoreUnavailable with the door's message and Retry-After."""
    body = {"error": {"code": "store_unavailable", "message": "nothing of it was stored", "field": None}}
    producer = _producer(httpx.Response(503, json=body, headers={"Retry-After": "7"}))
    with pytest.raises(StoreUnavailable, match="nothing of it was stored") as raised:
        producer.enqueue_many([EVENT])
    assert raised.value.retry_after_s == 7 and raised.value.error.code == "store_unavailable"


def test_other_503_stays_an_http_error() -> None:
    """A 503 that is not store_unavailable (a proxy, say) is an ordinary HTTP error."""
    producer = _producer(httpx.Response(503, text="upstream down"))
    with pytest.raises(httpx.HTTPStatusError):
        producer.enqueue(EVENT)
