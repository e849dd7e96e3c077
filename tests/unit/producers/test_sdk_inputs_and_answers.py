"""The SDK's two producers refuse the same input the same way, and its HTTP clients check what comes back:
the direct Producer refuses a nan, an inf or a lone surrogate as HttpProducer and the door do (it stored nan as
null, and raised a bare UnicodeEncodeError for a surrogate); HttpProducer refuses what the direct one refuses
(an event that is no object, a key that is no string) with the same InvalidEvent, and sends nothing for an empty
batch; a base URL with a password is refused unquoted; a success answer that is not the door's is
UnexpectedAnswer; all three clients close with ``with``."""

from __future__ import annotations

import math
from typing import Any

import httpx
import pytest
from redis import Redis

from producers import HttpProducer, InvalidEvent, Producer, SessionClient
from producers.sdk.http_door import UnexpectedAnswer
from worker.intake.emitter import NOT_TEXT, Emitter
from worker.settings import Settings
from worker.store.events import EventStore

EVENT = {"sourceType": "test.timeline", "sourceId": "s1", "scopeKey": "topic:a", "payload": {}}
ACCEPTED = {"results": [{"eventId": "evt_1", "sourceId": "s1", "status": "accepted"}]}
PASSWORD = "s3cret-pw"


def _emitter(**settings: Any) -> Emitter:
    """The direct Producer's validation (its Emitter), with no Redis behind it: validating sends nothing."""
    config = Settings(env="test", redis_url="redis://127.0.0.1:6379/0", **settings)
    return Emitter(config, EventStore(Redis(), config), lambda ref: None, source_types=["test.timeline"])


def _recording(answer: httpx.Response) -> tuple[HttpProducer, list[httpx.Request]]:
    sent: list[httpx.Request] = []
    producer = HttpProducer("http://door")
    transport = httpx.MockTransport(lambda request: sent.append(request) or answer)
    producer.client = httpx.Client(base_url="http://door", transport=transport)
    return producer, sent


def _direct_error(events: list[Any], *, single: bool = False) -> InvalidEvent:
    with pytest.raises(InvalidEvent) as refused:
        _emitter().validate_many(events, single=single)
    return refused.value


def _http_error(events: list[Any], *, single: bool = False) -> InvalidEvent:
    producer, sent = _recording(httpx.Response(202, json=ACCEPTED))
    with pytest.raises(InvalidEvent) as refused:
        producer.enqueue(events[0]) if single else producer.enqueue_many(events)
    assert sent == []  # refused before sending
    return refused.value


class TestDirectProducerIsStrict:
    @pytest.mark.parametrize(
        ("payload", "path"),
        [
            ({"score": math.nan}, "score"),
            ({"deep": [1, -math.inf]}, "deep.1"),
            ({"text": "a\ud800b"}, "text"),
            ({"\udc00": 1}, "\\udc00"),
        ],
        ids=["nan", "-inf nested", "lone surrogate", "surrogate key"],
    )
    def test_a_payload_json_has_no_form_for_is_refused_naming_it(
        self, payload: dict[str, Any], path: str
    ) -> None:
        """Refused as HttpProducer refuses it, the same code, field (its path, as the door names it) and message,
        single and in a batch."""
        bad = {**EVENT, "sourceId": "s2", "payload": payload}
        for events, single, field in (([bad], True, "payload"), ([EVENT, bad], False, "events[1].payload")):
            direct, http = _direct_error(events, single=single), _http_error(events, single=single)
            assert (direct.error.code, direct.error.field) == ("invalid_field", f"{field}.{path}")
            assert direct.error == http.error
        if isinstance(next(iter(payload.values())), str) or "\udc00" in payload:
            assert direct.error.message == f"events[1].payload.{path} {NOT_TEXT}"

    def test_a_source_type_with_a_lone_surrogate_is_refused_by_name(self) -> None:
        """Where unknown source types are allowed, a surrogate in one is an InvalidEvent, not UnicodeEncodeError."""
        emitter = _emitter(allow_unknown_source_types=True)
        with pytest.raises(InvalidEvent) as refused:
            emitter.validate({**EVENT, "sourceType": "x.\ud800"})
        assert refused.value.error.field == "sourceType"

    def test_the_producer_refuses_a_nan_and_closes_with_with(self, make_settings: Any) -> None:
        """End to end on Redis: nothing of the batch is stored; ``with`` closes the producer."""
        with Producer(make_settings()) as producer:
            prepared = producer.validate(EVENT)
            with pytest.raises(InvalidEvent) as refused:
                producer.enqueue_many([EVENT, {**EVENT, "sourceId": "s2", "payload": {"x": math.nan}}])
            assert refused.value.error.field == "events[1].payload.x"
            assert producer.status(prepared.event_id) is None
            closed: list[bool] = []
            producer.store.client.close = lambda: closed.append(True)  # type: ignore[method-assign]
        assert closed == [True]


class TestHttpProducerRefusesAsTheDirectOne:
    @pytest.mark.parametrize(
        "bad",
        ["hello", None, 5, {**EVENT, "payload": {1: 2}}, {**EVENT, 1: 2}],
        ids=["a string", "None", "a number", "a payload key not a str", "an event key not a str"],
    )
    def test_the_same_invalid_event(self, bad: Any) -> None:
        """``[good, "hello"]`` was a ValueError, ``[good, None]`` a TypeError, ``{1: 2}`` sent as ``{"1": 2}``:
        now the direct Producer's InvalidEvent, naming ``events[1]`` (or the field), nothing sent."""
        assert _http_error([EVENT, bad]).error == _direct_error([EVENT, bad]).error
        assert _http_error([bad], single=True).error == _direct_error([bad], single=True).error

    def test_an_empty_batch_sends_nothing(self) -> None:
        """``enqueue_many([])`` answers ``[]`` as the direct Producer does (it sent ``{"events": []}``)."""
        producer, sent = _recording(httpx.Response(202, json=ACCEPTED))
        assert producer.enqueue_many([]) == [] and sent == []


class TestUrl:
    @pytest.mark.parametrize("make", [HttpProducer, SessionClient], ids=["HttpProducer", "SessionClient"])
    def test_a_password_in_the_url_is_refused_unquoted(self, make: Any) -> None:
        """httpx's errors quote the URL (``raise_for_status``): one with a password is refused when the client is
        made, the TypeScript client's rule, and the error does not quote it."""
        with pytest.raises(ValueError, match="holds a user name or password") as refused:
            make(f"http://user:{PASSWORD}@127.0.0.1:9")
        assert PASSWORD not in str(refused.value) and "user" not in str(refused.value).split(" holds")[0]
        own = httpx.Client(base_url=f"http://user:{PASSWORD}@127.0.0.1:9")
        with pytest.raises(ValueError, match=r"client\.base_url holds a user name or password") as refused:
            make("http://127.0.0.1:9", client=own)
        assert PASSWORD not in str(refused.value)


class TestAnswers:
    @pytest.mark.parametrize(
        "answer",
        [
            httpx.Response(200, json={"ok": True}),
            httpx.Response(202, text="<html>accepted</html>"),
            httpx.Response(202, json={"results": ACCEPTED["results"]}),  # one result for two events
            httpx.Response(202, json={"results": [1, 2]}),
            httpx.Response(204),
        ],
        ids=["no results", "not json", "too few", "not objects", "no content"],
    )
    def test_a_success_that_is_not_the_doors_is_unexpected_answer(self, answer: httpx.Response) -> None:
        """Was a KeyError, a JSONDecodeError, or fewer results than events returned as if all was well."""
        producer, _ = _recording(answer)
        with pytest.raises(UnexpectedAnswer) as raised:
            producer.enqueue_many([EVENT, {**EVENT, "sourceId": "s2"}])
        message = str(raised.value)
        assert message.startswith(f"http://door POST /v1/events answered {answer.status_code} without")
        assert (
            message.endswith("is that the Agent Signal API?")
            and raised.value.status_code == answer.status_code
        )

    @pytest.mark.parametrize(
        ("answer", "call"),
        [
            (httpx.Response(204), "context"),
            (httpx.Response(200, text="<html>ok</html>"), "context"),
            (httpx.Response(200, json={"output": None}), "signal"),
            (httpx.Response(200, json={"length": "3"}), "append"),
        ],
        ids=["204", "not json", "output null", "length not a number"],
    )
    def test_a_session_answer_that_is_not_the_routes_is_unexpected_answer(
        self, answer: httpx.Response, call: str
    ) -> None:
        """A 204 or a page was a JSONDecodeError; ``{"output": null}`` made signal() return the string "None"."""
        transport = httpx.MockTransport(lambda _: answer)
        with SessionClient(client=httpx.Client(base_url="http://door", transport=transport)) as client:
            calls = {
                "context": lambda: client.context("s1"),
                "signal": lambda: client.signal("s1", "progress"),
                "append": lambda: client.append("s1", [{"role": "user", "content": "hi"}]),
            }
            with pytest.raises(UnexpectedAnswer, match="is that the Agent Signal API"):
                calls[call]()


def test_the_http_clients_close_with_with() -> None:
    """``with HttpProducer(...)`` and ``with SessionClient(...)`` close their httpx client on the way out."""
    with HttpProducer("http://127.0.0.1:9") as producer, SessionClient("http://127.0.0.1:9") as sessions:
        assert not producer.client.is_closed and not sessions.http.is_closed
    assert producer.client.is_closed and sessions.http.is_closed
