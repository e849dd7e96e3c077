"""A payload the SDK was given that JSON cannot hold (a datetime, bytes, a set, a circular reference) is refused as
a 422 naming the payload, before anything is stored: not a TypeError from deep inside the door."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from redis import Redis

from worker.intake.emitter import Emitter
from worker.intake.source_event import InvalidEvent
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
    [datetime.datetime(2026, 1, 1), b"bytes", {1, 2}, _circular()],
    ids=["datetime", "bytes", "set", "loop"],
)
def test_a_payload_json_cannot_hold_is_refused_by_name(value: Any) -> None:
    emitter = _emitter()
    good = {"sourceType": "t.x", "sourceId": "a", "scopeKey": "s", "payload": {}}
    bad = {**good, "sourceId": "b", "payload": {"v": value}}
    with pytest.raises(InvalidEvent) as refused:
        emitter.validate_many([good, bad])
    error = refused.value.error
    assert (error.code, error.field, refused.value.status_code) == ("invalid_field", "events[1].payload", 422)
    assert error.message.startswith("events[1].payload must be JSON: ")
