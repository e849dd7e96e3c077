"""HttpProducer keeps the direct Producer's error contract (no server needed): a payload JSON cannot carry is
InvalidEvent naming it, before anything is sent; the door's 503 is StoreUnavailable and its 429 OverLimit, both
with ``retry_after_s``; a rate limit and a 503 are sent again after their Retry-After, up to ``max_retries``;
a credential a header cannot carry is a ValueError that never quotes it."""

from __future__ import annotations

import datetime
import math
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import httpx
import pytest

from producers import HttpProducer, InvalidEvent, OverLimit, SessionClient, StoreUnavailable

EVENT = {"sourceType": "test.timeline", "sourceId": "s1", "scopeKey": "topic:a", "payload": {}}
ACCEPTED = {"results": [{"eventId": "evt_1", "sourceId": "s1", "status": "accepted"}]}
SECRET = "as_secret_0123456789abcdef"


def _error(code: str, message: str = "no", field: str | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "field": field}}


class Door:
    """A scripted door: answers ``responses`` in order (the last one again), records what was sent and waited."""

    def __init__(self, *responses: httpx.Response) -> None:
        self.responses = list(responses)
        self.sent: list[httpx.Request] = []
        self.waits: list[float] = []

    def answer(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request)
        return self.responses.pop(0) if len(self.responses) > 1 else self.responses[0]

    def producer(self, **options: Any) -> HttpProducer:
        producer = HttpProducer("http://door", **options)
        producer.client = httpx.Client(base_url="http://door", transport=httpx.MockTransport(self.answer))
        producer.sleep = self.waits.append
        return producer


def _leaks(exc: BaseException, secret: str) -> bool:
    """The secret in the exception's text, arguments, or its formatted traceback (causes and contexts too)."""
    texts = [str(exc), repr(exc), repr(exc.args), "".join(traceback.format_exception(exc))]
    return any(secret in text for text in texts)


def test_store_unavailable_is_typed_with_retry_after() -> None:
    """A 503 store_unavailable raises StoreUnavailable with the door's message and Retry-After."""
    body = _error("store_unavailable", "nothing of it was stored")
    door = Door(httpx.Response(503, json=body, headers={"Retry-After": "7"}))
    with pytest.raises(StoreUnavailable, match="nothing of it was stored") as raised:
        door.producer().enqueue_many([EVENT])
    assert raised.value.retry_after_s == 7 and raised.value.error.code == "store_unavailable"


def test_any_503_is_store_unavailable() -> None:
    """A 503 without the door's body (a proxy) is StoreUnavailable too, as SessionClient raises it (retry in 5 s)."""
    door = Door(httpx.Response(503, text="upstream down"))
    with pytest.raises(StoreUnavailable) as raised:
        door.producer().enqueue(EVENT)
    assert raised.value.retry_after_s == 5


@pytest.mark.parametrize(
    ("body", "headers", "what", "retry_after_s"),
    [
        (_error("rate_limited", "over this credential's rate"), {"Retry-After": "2"}, "rate_limited", 2),
        (_error("quota_exceeded", "user u1 stores too much"), {}, "quota_exceeded", 0),
        (_error("inbox_full", "scope full", "scopeKey"), {"Retry-After": "5"}, "inbox_full", 5),
    ],
)
def test_a_429_is_over_limit(
    body: dict[str, Any], headers: dict[str, str], what: str, retry_after_s: int
) -> None:
    """A 429 raises OverLimit (its code as ``what``, Retry-After as ``retry_after_s``, 0 without), not a bare
    httpx.HTTPStatusError."""
    door = Door(httpx.Response(429, json=body, headers=headers))
    with pytest.raises(OverLimit) as raised:
        door.producer().enqueue(EVENT)
    assert (raised.value.what, raised.value.retry_after_s) == (what, retry_after_s)
    assert raised.value.field == body["error"]["field"]


def test_a_rate_limit_and_a_503_are_sent_again_after_their_wait() -> None:
    """429 rate_limited, 429 tenant_rate_limited and 503 are retried after their Retry-After; the same body is
    sent each time (the door dedupes it) and the answer that finally comes is the result."""
    door = Door(
        httpx.Response(429, json=_error("rate_limited"), headers={"Retry-After": "2"}),
        httpx.Response(429, json=_error("tenant_rate_limited"), headers={"Retry-After": "1"}),
        httpx.Response(503, json=_error("store_unavailable"), headers={"Retry-After": "3"}),
        httpx.Response(202, json=ACCEPTED),
    )
    assert door.producer().enqueue(EVENT).status == "accepted"
    assert door.waits == [2, 1, 3] and len({r.content for r in door.sent}) == 1 and len(door.sent) == 4


@pytest.mark.parametrize(
    ("status", "body", "headers"),
    [
        (429, _error("quota_exceeded"), {}),  # no Retry-After: waiting does not help
        (429, _error("inbox_full"), {"Retry-After": "5"}),  # not a rate limit
        (429, _error("rate_limited"), {"Retry-After": "61"}),  # longer than the SDK waits by itself
        (503, _error("store_unavailable"), {"Retry-After": "120"}),
        (422, _error("invalid_field", "bad", "sourceId"), {}),
    ],
)
def test_what_waiting_does_not_fix_is_raised_at_once(
    status: int, body: dict[str, Any], headers: dict[str, str]
) -> None:
    """A quota, a full inbox, a wait over 60 s or a validation error is raised after one request, no wait."""
    door = Door(httpx.Response(status, json=body, headers=headers), httpx.Response(202, json=ACCEPTED))
    with pytest.raises((OverLimit, StoreUnavailable, InvalidEvent)):
        door.producer().enqueue(EVENT)
    assert len(door.sent) == 1 and door.waits == []


@pytest.mark.parametrize("max_retries", [0, 1, 3])
def test_retries_stop_after_max_retries(max_retries: int) -> None:
    """A door that stays over the rate is asked ``max_retries + 1`` times, then OverLimit is raised."""
    door = Door(httpx.Response(429, json=_error("rate_limited"), headers={"Retry-After": "1"}))
    with pytest.raises(OverLimit):
        door.producer(max_retries=max_retries).enqueue_many([EVENT])
    assert len(door.sent) == max_retries + 1 and door.waits == [1] * max_retries


def test_the_waits_add_up_to_at_most_max_wait_s() -> None:
    """A web handler that enqueues blocks at most ``max_wait_s`` (default 10 s): a Retry-After that would pass it
    is raised with its retry_after_s; 0 turns waiting off."""
    door = Door(httpx.Response(429, json=_error("rate_limited"), headers={"Retry-After": "4"}))
    with pytest.raises(OverLimit) as limited:
        door.producer().enqueue(EVENT)
    assert door.waits == [4, 4] and limited.value.retry_after_s == 4  # a third wait would make 12 s
    door = Door(httpx.Response(503, json=_error("store_unavailable"), headers={"Retry-After": "1"}))
    with pytest.raises(StoreUnavailable):
        door.producer(max_wait_s=0).enqueue(EVENT)
    assert door.waits == [] and len(door.sent) == 1


def test_a_lone_surrogate_is_invalid_event_naming_its_field() -> None:
    """A string JSON writes but UTF-8 cannot (a lone surrogate) names its field's path, as the door does."""
    door = Door(httpx.Response(202, json=ACCEPTED))
    with pytest.raises(InvalidEvent) as refused:
        door.producer().enqueue({**EVENT, "payload": {"text": "\ud800"}})
    assert refused.value.error.field == "payload.text" and door.sent == []


@pytest.mark.parametrize(
    "value",
    [datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC), b"ab", {1, 2}, math.nan, math.inf],
    ids=["datetime", "bytes", "set", "nan", "inf"],
)
def test_a_payload_json_cannot_carry_is_invalid_event_naming_it(value: object) -> None:
    """A datetime, bytes, a set, a nan or an inf in a payload is InvalidEvent naming its path ``payload.at``
    (``events[i].payload.at`` in a batch), as the direct Producer and the door name it; nothing is sent."""
    door = Door(httpx.Response(202, json=ACCEPTED))
    producer = door.producer()
    bad = {**EVENT, "sourceId": "s2", "payload": {"at": value}}
    with pytest.raises(InvalidEvent) as single:
        producer.enqueue(bad)
    with pytest.raises(InvalidEvent) as batch:
        producer.enqueue_many([EVENT, bad])
    assert (single.value.error.field, batch.value.error.field) == ("payload.at", "events[1].payload.at")
    said = "JSON numbers must be finite" if isinstance(value, float) else "must be JSON"
    assert single.value.error.code == "invalid_field" and said in single.value.error.message
    assert door.sent == []


BAD_TOKENS = [SECRET + "\nX-Evil: 1", "as secret 0123456789", SECRET + "é", SECRET + "\x7f", "as\tsecret"]


@pytest.mark.parametrize("token", BAD_TOKENS, ids=["newline", "space", "non-ascii", "del", "tab"])
@pytest.mark.parametrize("make", [HttpProducer, SessionClient], ids=["HttpProducer", "SessionClient"])
def test_a_token_a_header_cannot_carry_is_refused_without_quoting_it(
    make: Callable[..., Any], token: str
) -> None:
    """A credential with a space, a control character or non-ASCII inside is a ValueError at construction
    that never quotes it (httpx's LocalProtocolError quoted the whole ``Bearer <token>`` header)."""
    with pytest.raises(ValueError, match="token holds") as refused:
        make("http://door", token=token)
    assert not _leaks(refused.value, token) and not _leaks(refused.value, token.strip()[:12])


@pytest.mark.parametrize("token", [f"{SECRET}\n", f"  {SECRET}\r\n", f"\t{SECRET}"])
def test_whitespace_around_a_token_is_dropped(token: str) -> None:
    """A key read from a file (its CRLF, indentation) is sent as ``Bearer <key>``; a blank one sends none."""
    door = Door(httpx.Response(202, json=ACCEPTED))
    door.producer(token=token).enqueue(EVENT)
    door.producer(token=" \n").enqueue(EVENT)
    headers: Sequence[str | None] = [r.headers.get("authorization") for r in door.sent]
    assert headers == [f"Bearer {SECRET}", None]


@pytest.mark.parametrize(
    ("answer", "raised"),
    [
        (httpx.Response(404, text="<html>Nothing matches the given URI</html>"), "UnexpectedAnswer"),
        (httpx.Response(404, json=_error("http_404", "Not Found")), "UnexpectedAnswer"),  # no such route
        (httpx.Response(200, json={"eventId": "evt_1"}), "UnexpectedAnswer"),  # no status: not the door's
        (httpx.Response(409, json=_error("ambiguous_source_id", "two", "eventId")), "InvalidEvent"),
        (httpx.Response(503, json=_error("store_unavailable")), "StoreUnavailable"),
    ],
)
def test_status_over_http_reads_only_the_doors_answers(answer: httpx.Response, raised: str) -> None:
    """``status`` answers None only for the door's own ``not_found``: another server's 404, or the door's for a
    route it lacks, is not "no such event"; a 409 and a 503 are the SDK's exceptions, once (a read, no retry)."""
    door = Door(answer)
    with pytest.raises(Exception) as e:
        door.producer().status("s1")
    assert type(e.value).__name__ == raised
    assert len(door.sent) == 1 and door.sent[0].url.path == "/v1/events/s1"


def test_status_of_an_event_the_door_does_not_have_is_none() -> None:
    door = Door(httpx.Response(404, json=_error("not_found", "no event 'evt_x'", "eventId")))
    assert door.producer().status("evt_x") is None
    ok = Door(httpx.Response(200, json={"eventId": "evt_1", "status": "done"}))
    assert ok.producer().status("a/b") == {"eventId": "evt_1", "status": "done"}
    assert ok.sent[0].url.raw_path == b"/v1/events/a%2Fb"  # an id's slash stays in the id
    for dots in (".", ".."):  # ids too, not the URL's own "this" and "parent" segments
        ok.producer().status(dots)
        assert ok.sent[-1].url.raw_path == b"/v1/events/" + dots.replace(".", "%2E").encode()


@pytest.mark.parametrize(("status", "code"), [(401, "unauthorized"), (403, "forbidden")])
def test_a_refused_credential_has_a_type_of_its_own(status: int, code: str) -> None:
    """A 401 or 403 is no event's fault: ``CredentialRefused``, still an ``InvalidEvent`` (what it was), so an app
    that skips the event at fault on ``InvalidEvent`` can catch this one first instead of skipping them all."""
    from producers import CredentialRefused

    door = Door(httpx.Response(status, json=_error(code, "unknown, revoked or expired credential")))
    with pytest.raises(CredentialRefused) as refused:
        door.producer().enqueue(EVENT)
    assert isinstance(refused.value, InvalidEvent) and refused.value.status_code == status
    bad_event = Door(httpx.Response(422, json=_error("invalid_field", "no", "payload")))
    with pytest.raises(InvalidEvent) as invalid:
        bad_event.producer().enqueue(EVENT)
    assert not isinstance(invalid.value, CredentialRefused)
