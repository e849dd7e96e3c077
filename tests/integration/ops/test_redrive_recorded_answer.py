"""An edited redrive of a dead ``chat.request`` keeps the routing answer it was recorded with, or has none
(producers/sdk/dead_letters.py): a review put a made-up decision, rule and config fingerprint in a chain through a
redrive's edit, as ``POST /v1/events`` no longer lets a caller do. Real Redis; the stored events are read as the
redrive reads them."""

from __future__ import annotations

from typing import Any

import pytest

from producers import InvalidEvent, Producer
from producers.sdk.dead_letters import edited_bodies

pytestmark = pytest.mark.integration

REQUEST = {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}
ANSWER = {"facts": {}, "signals": {}, "decision": {"name": "small"}, "model": "small-model"}


def test_an_edit_keeps_or_drops_the_recorded_answer_and_may_not_make_one(make_settings: Any) -> None:
    producer = Producer(make_settings())
    try:
        recorded = (
            producer.enqueue(  # as POST /v1/route records it (straight to Redis: the door refuses this)
                {
                    "sourceType": "chat.request",
                    "sourceId": "rq-edit-1",
                    "payload": {
                        "request": REQUEST,
                        "routeResult": ANSWER,
                        "configFingerprint": "sha256:aaaaaaaaaaaa",
                    },
                }
            ).event_id
        )
        plain = producer.enqueue(
            {"sourceType": "chat.request", "sourceId": "rq-edit-2", "payload": {"request": REQUEST}}
        ).event_id
        kept = {"request": REQUEST, "routeResult": ANSWER, "configFingerprint": "sha256:aaaaaaaaaaaa"}
        assert set(edited_bodies(producer, [(recorded, kept), (plain, {"request": REQUEST})])) == {
            recorded,
            plain,
        }
        assert set(edited_bodies(producer, [(recorded, {"request": REQUEST})])) == {
            recorded
        }  # dropped: routed anew
        forged = {**ANSWER, "model": "gpt-ultra"}
        for index, (event_id, payload, field) in enumerate(
            [
                (recorded, {**kept, "routeResult": forged}, "routeResult"),
                (plain, {"request": REQUEST, "routeResult": forged}, "routeResult"),
                (
                    plain,
                    {"request": REQUEST, "configFingerprint": "sha256:000000000000"},
                    "configFingerprint",
                ),
            ]
        ):
            with pytest.raises(InvalidEvent) as refused:
                edited_bodies(producer, [(recorded, kept)] * index + [(event_id, payload)])
            assert refused.value.error.field == f"events[{index}].payload.{field}"
    finally:
        producer.close()
