"""No blocking work inside ``async def``: large bodies are decoded and validated in the threadpool, so a few
megabytes of JSON from any caller cannot stall every other request of the process (the ``/v1/route`` finding
of issue 12, and the JSON readers every route shares). Checked by the thread that decodes, not by timing."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from fastapi.testclient import TestClient

from producers.http import web_common
from producers.http.app import create_web_app

pytestmark = pytest.mark.integration


def test_large_bodies_are_decoded_off_the_event_loop(
    make_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[int] = []
    real = web_common.decode_json

    def spy(raw: bytes, **kwargs: Any) -> Any:
        threads.append(threading.get_ident())
        return real(raw, **kwargs)

    monkeypatch.setattr(web_common, "decode_json", spy)
    app = create_web_app(make_settings())

    @app.get("/test-loop-thread")
    async def loop_thread() -> dict[str, int]:  # runs on the event loop: its thread is the loop's
        return {"thread": threading.get_ident()}

    event = {"sourceType": "agent.user.message", "scopeKey": "topic:loop", "payload": {"message": "hi"}}
    with TestClient(app) as client:
        loop = client.get("/test-loop-thread").json()["thread"]
        small = client.post("/v1/events", json={**event, "sourceId": "small"})
        big_payload = {"message": "x" * (web_common.OFF_LOOP_BYTES + 1)}
        big = client.post("/v1/events", json={**event, "sourceId": "big", "payload": big_payload})
        session = client.post(
            "/v1/sessions/s-loop/context/messages",
            json={"messages": [{"role": "user", "content": "y" * (web_common.OFF_LOOP_BYTES + 1)}]},
        )
    assert (small.status_code, big.status_code, session.status_code) == (202, 202, 200)
    assert threads[0] == loop  # a small body: decoding it costs less than a thread hop
    assert threads[1] != loop and threads[2] != loop  # large ones: off the loop
