"""Session state is bounded (issue 12: "bodies are unbounded outside POST /v1/events (a 20 MB session message
was stored, with no TTL)").

Caps (``max_message_bytes``, ``max_session_messages``, ``max_session_bytes``) answer ``413 session_full`` naming
the field and store nothing of the request; every write refreshes a TTL (``session_ttl_s``) on every key of the
session. Apps are built by ``create_web_app`` from the ``make_settings`` fixture (a real Redis under the test's
own key prefix), without credentials: the caller is the local admin of tenant ``default``.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from httpx import Response
from redis import Redis

from sessions.store import session_scope
from tests.conftest import ROOT
from tests.security.conftest import ClientFactory
from worker.keys.layout import BucketKeys

pytestmark = pytest.mark.integration

FUNCTIONS = ROOT / "examples" / "functions"
MiB = 1024 * 1024


def U(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _record_bytes(message: dict[str, Any]) -> int:
    """The stored size of one message: its compact JSON, as the store encodes it."""
    return len(json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def _session_state_keys(
    redis_client: Redis, keys: BucketKeys, sid: str, user_id: str | None = None
) -> set[str]:
    """Every key holding the session's state: its scope's keys that are not the engine's (the inbox and event
    records of the events its tool calls recorded live by the pipeline's rules), and the user's session index."""
    scope_tag = "{" + session_scope(sid) + "}"
    found = {
        k
        for k in redis_client.scan_iter(match=f"{keys.prefix}*", count=1000)
        if scope_tag in k and not keys.is_engine_key(k)
    }
    if user_id is not None and redis_client.exists(keys.user_sessions(user_id)):
        found.add(keys.user_sessions(user_id))
    return found


def _error(response: Response) -> dict[str, Any]:
    return dict(response.json()["error"])


def test_twenty_megabyte_session_message_is_refused(
    app_client: ClientFactory, redis_client: Redis, keys: BucketKeys
) -> None:
    """A 20 MB message (let through the door) is 413 naming messages.3.content, and none of the request is stored."""
    client = app_client(max_request_bytes=32 * MiB)
    messages = [U("one"), U("two"), U("three"), U("x" * (20 * MiB))]
    response = client.post("/v1/sessions/big/context/messages", json={"messages": messages})
    assert response.status_code == 413
    error = _error(response)
    assert error["code"] == "session_full" and error["field"] == "messages.3.content"
    assert "262144" in error["message"]
    assert client.get("/v1/sessions/big/context").json() == {
        "messages": [],
        "nCheckpoints": 0,
        "tokenCount": 0,
    }
    assert _session_state_keys(redis_client, keys, "big") == set()
    # A message just under the cap is stored: the cap refuses the oversized one, not every large one.
    under = U("y" * (256 * 1024 - 100))
    assert _record_bytes(under) <= 256 * 1024
    ok = client.post("/v1/sessions/big/context/messages", json={"messages": [under]})
    assert ok.status_code == 200 and ok.json() == {"length": 1}


@pytest.mark.parametrize("cap", ["records", "bytes"])
def test_caps_hold_under_concurrent_appends(
    app_client: ClientFactory, redis_client: Redis, keys: BucketKeys, cap: str
) -> None:
    """Two threads append two messages at a time until refused: the context ends at 24 records (25 is the cap,
    26 would pass it), never more, and the byte counter equals the stored records' bytes."""
    pair = [U("m" * 100), U("n" * 100)]
    record = _record_bytes(pair[0])
    limits = (
        {"max_session_messages": 25} if cap == "records" else {"max_session_bytes": 25 * record + record // 2}
    )
    client = app_client(**limits)

    def append_until_refused(_: int) -> tuple[int, dict[str, Any]]:
        accepted = 0
        while True:
            response = client.post("/v1/sessions/race/context/messages", json={"messages": pair})
            if response.status_code != 200:
                return accepted, {"status": response.status_code, **_error(response)}
            accepted += 1

    with ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(append_until_refused, range(2)))
    assert sum(accepted for accepted, _ in outcomes) == 12
    for _, refused in outcomes:
        assert refused["status"] == 413 and refused["code"] == "session_full"
        assert refused["field"] == "messages"
    scope = session_scope("race")
    stored = redis_client.lrange(keys.context(scope), 0, -1)
    assert len(stored) == 24
    assert int(redis_client.hget(keys.context_meta(scope), "bytes") or 0) == sum(
        len(r.encode("utf-8")) for r in stored
    )
    assert len(client.get("/v1/sessions/race/context").json()["messages"]) == 24


def test_every_session_key_has_a_ttl_after_each_kind_of_write(
    app_client: ClientFactory, redis_client: Redis, keys: BucketKeys
) -> None:
    """Before each kind of write every session key is set to expire in 50 s; after it, every key of the session
    (settings, context, meta, checkpoints, usage, D-Mail, function state, the user's index) has a TTL refreshed to
    the configured 1000 s."""
    client = app_client(session_ttl_s=1000, functions_dir=str(FUNCTIONS))
    base = "/v1/sessions/ttl"
    writes: list[tuple[str, str, str, dict[str, Any]]] = [
        ("settings", "PUT", base, {"dmailEnabled": True, "userId": "u1"}),
        ("checkpoint", "POST", f"{base}/context/checkpoint", {}),
        ("append", "POST", f"{base}/context/messages", {"messages": [U("hi")], "tokenCount": 5}),
        ("checkpoint again", "POST", f"{base}/context/checkpoint", {}),
        ("dmail", "POST", f"{base}/dmail", {"message": "go back", "checkpoint_id": 0}),
        ("step end", "POST", f"{base}/steps/end", {}),
        ("revert", "POST", f"{base}/context/revert", {"checkpointId": 0}),
        ("signal", "POST", f"{base}/signal", {"type": "answer"}),
        ("turn", "POST", f"{base}/turn", {}),
        ("artifact", "PUT", f"{base}/artifacts/plan", {"content": "the plan"}),
        ("compact", "POST", f"{base}/context/compact", {"messages": [U("summary")]}),
        ("clear", "POST", f"{base}/context/clear", {}),
    ]
    seen: set[str] = set()
    for name, method, path, body in writes:
        for key in _session_state_keys(redis_client, keys, "ttl", "u1"):
            redis_client.expire(key, 50)
        response = client.request(method, path, json=body)
        assert response.status_code == 200, (name, response.text)
        found = _session_state_keys(redis_client, keys, "ttl", "u1")
        ttls = {key: redis_client.ttl(key) for key in found}
        assert found and all(50 < ttl <= 1000 for ttl in ttls.values()), (name, ttls)
        seen |= found
    scope = session_scope("ttl")
    assert seen >= {
        keys.session(scope),
        keys.context(scope),
        keys.context_meta(scope),
        keys.checkpoints(scope),
        keys.usage(scope),
        keys.dmail(scope),
        keys.functions_state(scope),
        keys.user_sessions("u1"),
    }


def test_oversized_artifact_is_refused(
    app_client: ClientFactory, redis_client: Redis, keys: BucketKeys
) -> None:
    """An artifact over max_message_bytes is 413 naming content; no function state is written."""
    client = app_client(functions_dir=str(FUNCTIONS))
    response = client.put("/v1/sessions/art/artifacts/plan", json={"content": "p" * (256 * 1024 + 1)})
    assert response.status_code == 413
    assert _error(response)["code"] == "session_full" and _error(response)["field"] == "content"
    assert client.get("/v1/sessions/art/artifacts").json() == {}
    assert not redis_client.exists(keys.functions_state(session_scope("art")))
    assert client.put("/v1/sessions/art/artifacts/plan", json={"content": "fits"}).status_code == 200


def test_function_state_and_dmail_are_bounded(
    app_client: ClientFactory, redis_client: Redis, keys: BucketKeys
) -> None:
    """A signal whose payload would grow the function state past max_session_bytes is 413 naming payload, and a
    D-Mail over max_message_bytes is 413 naming message; neither changes what is stored."""
    client = app_client(functions_dir=str(FUNCTIONS), max_session_bytes=64 * 1024)
    assert (
        client.put("/v1/sessions/fn", json={"dmailEnabled": True, "functions": ["approval"]}).status_code
        == 200
    )
    state_key = keys.functions_state(session_scope("fn"))
    before = redis_client.get(state_key)
    big = client.post(
        "/v1/sessions/fn/signal", json={"type": "answer", "payload": {"text": "z" * (70 * 1024)}}
    )
    assert big.status_code == 413
    assert _error(big)["code"] == "session_full" and _error(big)["field"] == "payload"
    assert redis_client.get(state_key) == before
    assert client.post("/v1/sessions/fn/context/checkpoint", json={}).status_code == 200
    dmail = client.post("/v1/sessions/fn/dmail", json={"message": "d" * (256 * 1024 + 1), "checkpoint_id": 0})
    assert dmail.status_code == 413
    assert _error(dmail)["code"] == "session_full" and _error(dmail)["field"] == "message"
    assert not redis_client.exists(keys.dmail(session_scope("fn")))


def test_a_captured_artifact_is_held_to_the_artifact_cap(
    app_client: ClientFactory, redis_client: Redis, keys: BucketKeys
) -> None:
    """A signal's or a tool call's payload captured as an artifact (``approval_request``,
    ``__signal_payload``) was stored at 100 KB past a 5 KB artifact cap that a written artifact is held to: now
    413 naming the payload, nothing stored."""
    client = app_client(functions_dir=str(FUNCTIONS), max_message_bytes=5000)
    assert client.put("/v1/sessions/cap", json={"functions": ["approval"]}).status_code == 200
    state_key = keys.functions_state(session_scope("cap"))
    before = redis_client.get(state_key)
    payload = {"plan": "x" * 10_000}
    signalled = client.post("/v1/sessions/cap/signal", json={"type": "need_approval", "payload": payload})
    assert signalled.status_code == 413, signalled.text
    assert _error(signalled)["field"] == "payload" and "approval_request" in _error(signalled)["message"]
    tool = client.post(
        "/v1/sessions/cap/tool", json={"name": "signal", "args": {"type": "answer", "payload": payload}}
    )
    assert tool.status_code == 413 and _error(tool)["field"] == "args", tool.text
    assert redis_client.get(state_key) == before
    small = client.post("/v1/sessions/cap/signal", json={"type": "need_approval", "payload": {"plan": "p"}})
    assert small.status_code == 200
    long_name = client.post("/v1/sessions/cap/tool", json={"name": "t" * 300})
    assert long_name.status_code == 422 and _error(long_name)["field"] == "name"
