"""A payload the SDK was given that JSON cannot hold (a datetime, bytes, a set, a circular reference) is refused as
a 422 naming the payload, before anything is stored: not a TypeError from deep inside the door."""

from __future__ import annotations

import datetime
import math
from typing import Any

import pytest
from redis import Redis

from worker.intake.emitter import Emitter
from worker.intake.source_event import MAX_PAYLOAD_DEPTH, InvalidEvent
from worker.settings import Settings
from worker.store.events import EventStore


def _emitter() -> Emitter:
    settings = Settings(env="test", redis_url="redis://127.0.0.1:6379/0")  # validation sends nothing
    return Emitter(settings, EventStore(Redis(), settings), lambda ref: None, source_types=["t.x"])


def _circular() -> dict[str, Any]:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    return loop


@pytest.mark.parametrize(
    "value",
    [datetime.datetime(2026, 1, 1), b"bytes", {1, 2}, _circular(), 10**5000],
    ids=["datetime", "bytes", "set", "loop", "long int"],
)
def test_a_payload_json_cannot_hold_is_refused_by_name(value: Any) -> None:
    emitter = _emitter()
    good = {"sourceType": "t.x", "sourceId": "a", "scopeKey": "s", "payload": {}}
    bad = {**good, "sourceId": "b", "payload": {"v": value}}
    with pytest.raises(InvalidEvent) as refused:
        emitter.validate_many([good, bad])
    error = refused.value.error
    if isinstance(value, dict):  # the loop: found by its depth before json.dumps would recurse into it
        assert (error.code, error.field) == ("invalid_field", "events[1].payload")
        assert (
            error.message
            == f"events[1].payload nests deeper than {MAX_PAYLOAD_DEPTH} levels (or contains itself)"
        )
    else:  # named by its path, as the door names a body's
        assert (error.code, error.field, refused.value.status_code) == (
            "invalid_field",
            "events[1].payload.v",
            422,
        )
        assert error.message.startswith("events[1].payload.v must be JSON: ")


@pytest.mark.parametrize(
    ("payload", "field", "literal"),
    [
        ({"score": math.nan}, "payload.score", "NaN"),
        ({"deep": {"x": [1, -math.inf]}}, "payload.deep.x.1", "-Infinity"),
        ({"ok": [1.5], "t": ({"a": math.inf},)}, "payload.t.0.a", "Infinity"),
    ],
)
def test_a_number_json_has_no_form_for_is_named_by_its_path(
    payload: dict[str, Any], field: str, literal: str
) -> None:
    """A nan or an inf is refused naming its path and quoting it as the door does (payload.deep.x.1)."""
    good = {"sourceType": "t.x", "sourceId": "a", "scopeKey": "s"}
    with pytest.raises(InvalidEvent) as refused:
        _emitter().validate({**good, "payload": payload})
    assert refused.value.error.field == field
    assert (
        refused.value.error.message
        == f"{field} is {literal}: JSON numbers must be finite (no NaN or Infinity)"
    )


def _nested(depth: int) -> dict[str, Any]:
    """A payload ``depth`` levels deep (the payload itself is level 1), lists and objects in turn."""
    value: Any = 1
    for level in range(depth - 1):
        value = [value] if level % 2 else {"k": value}
    return {"x": value}


def test_a_payload_nested_past_the_limit_is_refused_by_name() -> None:
    emitter = _emitter()
    good = {"sourceType": "t.x", "sourceId": "a", "scopeKey": "s"}
    assert emitter.validate({**good, "payload": _nested(MAX_PAYLOAD_DEPTH)}).body  # the limit itself is fine
    for depth in (MAX_PAYLOAD_DEPTH + 1, 5_000):  # 5,000: past Python's own recursion limit too
        with pytest.raises(InvalidEvent) as refused:
            emitter.validate({**good, "payload": _nested(depth)})
        error = refused.value.error
        assert (error.code, error.field) == ("invalid_field", "payload")
        assert error.message == f"payload nests deeper than {MAX_PAYLOAD_DEPTH} levels (or contains itself)"


def test_a_hook_answering_no_status_is_refused_before_anything_is_stored() -> None:
    """Its verdict is checked before the store is called: this store's Redis does not exist, so reaching it
    would raise StoreUnavailable instead."""
    settings = Settings(env="test", redis_url="redis://127.0.0.1:1/0")
    store = EventStore(Redis(port=1, socket_connect_timeout=0.5), settings)
    emitter = Emitter(
        settings, store, lambda ref: None, source_types=["t.x"], admission=[lambda batch: {0: 7}]
    )
    prepared = emitter.validate({"sourceType": "t.x", "sourceId": "a", "scopeKey": "s", "payload": {}})
    with pytest.raises(TypeError, match="answered 7 for event 0: not a status"):
        emitter.enqueue([prepared])
