"""A door in linear time that reads nothing before it knows you (issue 26: findings 1, 6, 10 and 11): one
regression test per finding, named after it.

Apps are built by ``create_web_app`` on a real Redis under the test's own key prefix; what depends on the
server (connection caps, header and body deadlines, what is read before authentication) runs a real web process
(``start_web``) and talks raw HTTP/1.1 to it over sockets.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from redis import Redis

from producers._web_common import MAX_JSON_DEPTH
from tests.security.conftest import ClientFactory
from worker.keys import Keys

pytestmark = pytest.mark.integration

BOOT = "bootstrap-key-for-the-door-0123456789"
EVENT: dict[str, Any] = {
    "sourceType": "agent.user.message",
    "sourceId": "msg_door_1",
    "payload": {"topicId": "tpc_1", "message": "hi"},
}


def _bearer(credential: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {credential}"}


def _stored_events(redis_client: Redis, keys: Keys) -> list[str]:
    """Event records under the test's prefix (what an accepted event leaves)."""
    return [k for k in redis_client.scan_iter(match=f"{keys.prefix}*") if ":ev:" in k]


# --- finding 1: one request froze a web process -----------------------------------------------------------


def _shapes(size: int) -> dict[str, bytes]:
    """Bodies of about ``size`` bytes that stress each step of the depth check."""
    return {
        # the attack: a quote and then escaped quotes, never closed (the old check rescanned from every quote)
        "escaped quotes": b'"' + b'\\"' * (size // 2),
        "escaped backslashes": b'"' + b"\\\\" * (size // 2),
        "backslash runs": b'["' + b'\\\\\\"[' * (size // 5) + b'"]',
        "bare quotes": b'"' * size,
        "many strings": b"[" + b'"[{",' * (size // 5) + b'""]',
        "deep, repeated": (b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH + b",") * (size // 129),
        "too deep": b"[" * size,
        "events": json.dumps({"events": [EVENT] * (size // 100)}).encode(),
    }


def test_json_depth_check_is_linear_in_the_body() -> None:
    """The depth check's work (bytes its C loops visit, summed) stays within a constant times the body for
    every shape and size; the old escape-aware regular expression rescanned from every quote (a 48 KB body
    of escaped quotes held the GIL for 13 s)."""
    from producers._strict_json import scan_depth  # the work counter: the old check had none

    bound = MAX_JSON_DEPTH + 5  # the module docstring's bound: five passes, then one per level
    for size in (16 * 1024, 64 * 1024, 256 * 1024, 1024 * 1024):
        for name, raw in _shapes(size).items():
            scan = scan_depth(raw, MAX_JSON_DEPTH)
            assert scan.bytes_scanned <= bound * len(raw), (name, size, scan)
    assert scan_depth(b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1), MAX_JSON_DEPTH).deeper
    assert not scan_depth(b'["' + b"[" * 100 + b'\\"]"]', MAX_JSON_DEPTH).deeper  # brackets in a string


def test_the_attack_body_is_answered_at_once(app_client: ClientFactory) -> None:
    """Through the app, a MiB of escaped quotes is a 422 (invalid JSON) like any broken body: with the old
    check this request alone would have held the process for hours."""
    client = app_client()
    response = client.post(
        "/v1/events", content=b'"' + b'\\"' * (512 * 1024), headers={"content-type": "application/json"}
    )
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "invalid_json"


# --- finding 11: a lone surrogate gave a 500, NaN and Infinity were stored ---------------------------------


@pytest.mark.parametrize(
    ("raw_value", "shown"),
    [("NaN", "NaN"), ("-Infinity", "-Infinity"), ("1e999", "1e999"), ('"\\ud800"', "lone surrogate")],
)
def test_lone_surrogates_nan_and_infinity_are_422(
    app_client: ClientFactory, redis_client: Redis, keys: Keys, raw_value: str, shown: str
) -> None:
    """Each is a 422 naming the field, in a single event, a batch and a session message; nothing is stored."""
    client = app_client()
    single = '{"sourceType":"agent.user.message","sourceId":"m1","payload":{"topicId":"t","score":VALUE}}'
    bodies = [
        ("/v1/events", single.replace("VALUE", raw_value), "payload.score"),
        (
            "/v1/events",
            '{"events":[EVENT]}'.replace("EVENT", single.replace("VALUE", raw_value)),
            "events.0.payload.score",
        ),
        (
            "/v1/sessions/s1/context/messages",
            '{"messages":[{"role":"user","content":VALUE}]}'.replace("VALUE", raw_value),
            "messages.0.content",
        ),
    ]
    for path, body, field in bodies:
        response = client.post(path, content=body.encode(), headers={"content-type": "application/json"})
        assert response.status_code == 422, (path, response.text)
        error = response.json()["error"]
        assert error["field"] == field and shown in error["message"], error
    assert _stored_events(redis_client, keys) == []
    assert not [k for k in redis_client.scan_iter(match=f"{keys.prefix}*") if "ctx" in k]
    # a surrogate pair is one character, not a lone surrogate: accepted
    pair = single.replace("VALUE", '"\\ud83d\\ude00"')
    assert (
        client.post(
            "/v1/events", content=pair.encode(), headers={"content-type": "application/json"}
        ).status_code
        == 202
    )
