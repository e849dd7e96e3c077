"""D-Mail's bounds and events on a real Redis (an audit's findings): a D-Mail is measured as the context message
step end appends (JSON-escaped as Lua's cjson writes it), an applied D-Mail never takes the context past its caps,
and the events a D-Mail records carry a bounded excerpt of its message and its validated checkpoint id."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from producers.http.app import create_web_app
from producers.http.records import RECORD_ERROR_HEADER
from sessions.dmail import DMAIL_PREFIX, applied_record_bytes
from sessions.store import session_scope
from worker.keys.layout import BucketKeys

pytestmark = pytest.mark.integration

Start = Callable[..., TestClient]
Recorded = Callable[[TestClient], list[dict[str, Any]]]


@pytest.fixture
def start(make_settings: Any) -> Iterator[Start]:
    """Factory: a started TestClient of ``create_web_app(make_settings(**overrides))`` (one Redis prefix)."""
    clients: list[TestClient] = []

    def started(**overrides: Any) -> TestClient:
        client = TestClient(create_web_app(make_settings(**overrides)))
        clients.append(client)
        return client.__enter__()

    yield started
    for client in clients:
        client.__exit__(None, None, None)


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> Recorded:
    """The source events a client's routes enqueue, as they hand them to the producer (enqueued as before)."""

    def capture(client: TestClient) -> list[dict[str, Any]]:
        producer = client.app.state.producer  # type: ignore[attr-defined]
        events: list[dict[str, Any]] = []
        enqueue = producer.enqueue

        def enqueue_and_keep(event: dict[str, Any], **kwargs: Any) -> Any:
            events.append(event)
            return enqueue(event, **kwargs)

        monkeypatch.setattr(producer, "enqueue", enqueue_and_keep)
        return events

    return capture


def U(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _session(client: TestClient, sid: str) -> str:
    assert client.put(f"/v1/sessions/{sid}", json={"dmailEnabled": True}).status_code == 200
    return sid


def _checkpoint(client: TestClient, sid: str) -> int:
    response = client.post(f"/v1/sessions/{sid}/context/checkpoint", json={})
    assert response.status_code == 200, response.text
    return int(response.json()["checkpointId"])


def _append(client: TestClient, sid: str, text: str) -> None:
    response = client.post(f"/v1/sessions/{sid}/context/messages", json={"messages": [U(text)]})
    assert response.status_code == 200, response.text


def _send(client: TestClient, sid: str, message: str, checkpoint_id: Any) -> Any:
    return client.post(f"/v1/sessions/{sid}/dmail", json={"message": message, "checkpoint_id": checkpoint_id})


def _end(client: TestClient, sid: str) -> Any:
    return client.post(f"/v1/sessions/{sid}/steps/end", json={})


def _stored(redis_client: Redis, keys: BucketKeys, sid: str) -> tuple[list[str], int]:
    """The context's records and its byte counter."""
    scope = session_scope(sid)
    records = redis_client.lrange(keys.context(scope), 0, -1)
    return records, int(redis_client.hget(keys.context_meta(scope), "bytes") or 0)


def _refused_as_message(response: Any) -> str:
    assert response.status_code == 413, response.text
    error = response.json()["error"]
    assert error["code"] == "session_full" and error["field"] == "message"
    return str(error["message"])


class TestMeasuredAsTheMessageItBecomes:
    @pytest.mark.parametrize(
        "message",
        ["\x01" * 262_000, '"' * 140_000, "/" * 140_000, "\x7f" * 100_000],
        ids=["control", "quote", "slash", "delete"],
    )
    def test_escaping_cannot_inflate_the_context(
        self, start: Start, redis_client: Redis, keys: BucketKeys, message: str
    ) -> None:
        """A D-Mail under the byte cap as raw UTF-8 but over it once JSON-escaped (control characters and DEL 6
        bytes, quotes and slashes 2) was applied as a 1.57 MB context and every later append was 413: now the
        send is 413 naming ``message``, nothing is pending, and the session keeps working."""
        client = start(max_session_bytes=500_000)
        sid = _session(client, "esc")
        _checkpoint(client, sid)
        _append(client, sid, "y" * 200_000)
        assert "would be" in _refused_as_message(_send(client, sid, message, 0))
        assert _end(client, sid).json() == {"outcome": "none"}
        _append(client, sid, "z")
        records, counted = _stored(redis_client, keys, sid)
        assert counted == sum(len(r.encode()) for r in records) <= 500_000

    def test_the_measure_is_the_record_lua_writes(
        self, start: Start, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """applied_record_bytes is exactly the size of the record step_end.lua appends, for every ASCII
        character (cjson escapes "/" and DEL, which Python's json does not) and multi-byte UTF-8."""
        client = start()
        sid = _session(client, "exact")
        text = "a" + "".join(chr(i) for i in range(128)) + "é€😀</system>" + "z"
        _checkpoint(client, sid)
        assert _send(client, sid, text, 0).json()["isError"] is False
        assert _end(client, sid).json()["outcome"] == "applied"
        records, _ = _stored(redis_client, keys, sid)
        assert len(records[-1].encode()) == applied_record_bytes(text)
        assert _end(client, sid).json() == {"outcome": "none"}
        context = client.get(f"/v1/sessions/{sid}/context").json()["messages"]
        assert context[-1] == U(f"<system>{DMAIL_PREFIX}{text}</system>")

    def test_the_cap_holds_to_the_byte(self, start: Start) -> None:
        """A D-Mail whose record is exactly max_message_bytes is sent; one more byte of text is 413."""
        limit = 4000
        client = start(max_message_bytes=limit)
        sid = _session(client, "edge")
        _checkpoint(client, sid)
        fits = "x" * (limit - applied_record_bytes(""))
        assert applied_record_bytes(fits) == limit
        assert _send(client, sid, fits + "x", 0).status_code == 413
        assert _send(client, sid, fits, 0).json()["isError"] is False
        assert _end(client, sid).json()["outcome"] == "applied"


class TestAnAppliedDMailFitsTheContext:
    @pytest.mark.parametrize(
        ("caps", "unit"),
        [({"max_session_bytes": 300_000}, "300000 bytes"), ({"max_session_messages": 5}, "5 records")],
    )
    def test_refused_at_send_against_the_context_the_revert_leaves(
        self, start: Start, redis_client: Redis, keys: BucketKeys, caps: dict[str, int], unit: str
    ) -> None:
        """Applied, a D-Mail to checkpoint 1 would make the context pass its cap (the 200 KB message before the
        checkpoint stays): 413 naming ``message``; the same D-Mail to checkpoint 0 (the revert drops that
        message) is sent and applied, and the context stays within its caps."""
        client = start(**caps)
        sid = _session(client, "room")
        _checkpoint(client, sid)
        _append(client, sid, "y" * 200_000)
        _checkpoint(client, sid)
        message = "x" * 150_000
        refusal = _refused_as_message(_send(client, sid, message, 1))
        assert unit in refusal and "checkpoint 1" in refusal
        assert _end(client, sid).json() == {"outcome": "none"}
        assert _send(client, sid, message, 0).json()["isError"] is False
        assert _end(client, sid).json()["outcome"] == "applied"
        records, counted = _stored(redis_client, keys, sid)
        assert counted == sum(len(r.encode()) for r in records)
        assert counted <= caps.get("max_session_bytes", counted) and len(records) <= caps.get(
            "max_session_messages", len(records)
        )

    def test_discarded_at_step_end_once_the_caps_were_lowered(
        self, start: Start, recorded: Recorded, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """A D-Mail sent under the caps of the time, ended by a process with a lower cap (a restart with new
        settings), is discarded: the context is untouched and the discard event says ``session_full``."""
        sender = start()
        sid = _session(sender, "lowered")
        _checkpoint(sender, sid)
        _append(sender, sid, "y" * 100_000)
        _checkpoint(sender, sid)
        assert _send(sender, sid, "x" * 100_000, 1).json()["isError"] is False
        ender = start(max_session_bytes=150_000)
        events = recorded(ender)
        before = _stored(redis_client, keys, sid)
        ended = _end(ender, sid)
        assert ended.json() == {"outcome": "discarded"} and RECORD_ERROR_HEADER not in ended.headers
        assert _stored(redis_client, keys, sid) == before
        (event,) = events
        assert event["sourceType"] == "agent.dmail.discarded"
        assert event["payload"]["reason"] == "session_full"


class TestEvents:
    @pytest.mark.parametrize(
        ("message", "caps"),
        [("hi" + "\n" * 200_000, {}), ('"' * 140_000, {"max_message_bytes": 1024 * 1024})],
        ids=["padded", "quotes"],
    )
    def test_the_events_of_a_large_dmail_are_recorded(
        self, start: Start, recorded: Recorded, message: str, caps: dict[str, int]
    ) -> None:
        """A D-Mail well within its caps whose message, escaped, passes max_event_bytes lost its sent and
        reverted events (payload_too_large): they now carry the excerpt the receipt shows, the message's UTF-8
        length and its sha256, and are recorded."""
        client = start(**caps)
        events = recorded(client)
        sid = _session(client, "big")
        _checkpoint(client, sid)
        sent = _send(client, sid, message, 0)
        assert sent.json()["isError"] is False and RECORD_ERROR_HEADER not in sent.headers
        ended = _end(client, sid)
        assert ended.json()["outcome"] == "applied" and RECORD_ERROR_HEADER not in ended.headers
        assert [e["sourceType"] for e in events] == ["agent.dmail.sent", "agent.context.reverted"]
        text = message.strip()
        excerpt = text if len(text) <= 280 else text[:277] + "..."
        raw = message.encode()
        for event in events:
            payload = event["payload"]
            assert payload["message"] == excerpt and payload["checkpointId"] == 0
            assert payload["messageBytes"] == len(raw)
            assert payload["messageSha256"] == hashlib.sha256(raw).hexdigest()

    @pytest.mark.parametrize(("given", "validated"), [("0", 0), (1.0, 1), (True, 1)])
    def test_the_sent_event_records_the_validated_checkpoint_id(
        self, start: Start, recorded: Recorded, given: Any, validated: int
    ) -> None:
        """SendDMail's arguments are validated in lax mode ("0", 1.0 and true are ids): the event recorded the
        argument as given; it records the integer the D-Mail went to."""
        client = start()
        events = recorded(client)
        sid = _session(client, "lax")
        _checkpoint(client, sid)
        _checkpoint(client, sid)
        assert _send(client, sid, "back", given).json()["isError"] is False
        (event,) = events
        checkpoint_id = event["payload"]["checkpointId"]
        assert type(checkpoint_id) is int and checkpoint_id == validated
