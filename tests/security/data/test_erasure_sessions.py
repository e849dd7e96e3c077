"""Erasure and the session context's byte bookkeeping, on a real Redis: a session keeps, in its ctxmeta
(``countedFor``) and its pending D-Mail (``countedIn``), the key of the count its bytes were counted in, which
names the user. A review found that a session moved to another user kept the first user's key past that user's
erasure, and that a session of the erased user that outlived the erasure (its scope busy) took the bytes the
erasure had already taken out of the tenant's count out of it a second time."""

from __future__ import annotations

import json

import pytest
from redis import Redis

from sessions.store import session_scope
from tests.security.conftest import ClientFactory
from tests.security.data.test_erasure import _dump, _mentions
from tests.security.tenants.test_session_bytes_given_back import BIG, Door
from worker.keys.layout import BucketKeys, Keys

pytestmark = pytest.mark.integration


def _write_with_a_pending_dmail(door: Door, session: str, user: str) -> None:
    """The user's session: a checkpoint, 4 KB after it, and a D-Mail back to the checkpoint, still pending."""
    headers = door.users[user]
    answer = door.client.put(f"/v1/sessions/{session}", json={"dmailEnabled": True}, headers=headers)
    assert answer.status_code == 200, answer.text
    door.post(session, "context/checkpoint", {}, headers)
    door.post(session, "context/messages", BIG, headers)
    assert (
        door.post(session, "dmail", {"message": "go back", "checkpoint_id": 0}, headers)["isError"] is False
    )


def test_a_session_moved_to_another_user_keeps_nothing_naming_the_first_past_their_erasure(
    app_client: ClientFactory, redis_client: Redis, keys: BucketKeys
) -> None:
    """alice writes to a session (and leaves a D-Mail pending), the session moves to bob, alice is erased: the
    session's ctxmeta and its D-Mail named alice's byte count until bob's first write, and her erasure never
    touches a session that names another user. The move now forgets whose count it was."""
    door = Door(app_client, redis_client, keys)
    _write_with_a_pending_dmail(door, "s-mv", "alice")
    moved = door.client.put("/v1/sessions/s-mv", json={"userId": "bob"}, headers=door.operator)
    assert moved.status_code == 200, moved.text

    erased = door.client.delete("/v1/users/alice", headers=door.operator)
    assert erased.status_code == 200 and erased.json()["busyScopes"] == 0, erased.text

    assert _mentions(_dump(redis_client, keys), "alice") == []
    # bob's session is whole: the context and the D-Mail are still there, and applying it takes nothing from bob
    bob_before = door.counts("bob")
    assert door.post("s-mv", "steps/end", {}, door.users["bob"])["outcome"] == "applied"
    assert door.counts("bob")[0] >= bob_before[0]


def test_a_session_that_outlives_its_users_erasure_takes_nothing_from_the_tenant_twice(
    app_client: ClientFactory, redis_client: Redis, keys: BucketKeys, scope_buckets: int
) -> None:
    """The erasure takes alice's per-day bytes out of the tenant's count; her session, whose scope a drain held
    (busy), survives it. A revert there took its dropped bytes out of the tenant's count again (the review's
    run: 9,085 -> 5,028 after the erasure -> 971 after the revert, while bob alone held 5,028). The tenant's count
    now stays every user's counts together, and what the session writes after the erasure is still given back."""
    door = Door(app_client, redis_client, keys)
    bob = door.users["bob"]
    assert door.client.put("/v1/sessions/s-bob", json={}, headers=bob).status_code == 200
    door.post("s-bob", "context/messages", BIG, bob)
    _write_with_a_pending_dmail(door, "s-al", "alice")
    alice_count, bob_count, tenant = door.counts("alice", "bob")
    assert tenant == alice_count + bob_count and alice_count > 4000

    scope = session_scope("s-al")
    lease = Keys(keys.prefix, "acme", scope_buckets).for_scope(scope).lease(scope)
    redis_client.set(lease, "a-drain|holding-it", px=600_000)  # a drain holds the session's scope
    erased = door.client.delete("/v1/users/alice", headers=door.operator)
    assert erased.status_code == 200 and erased.json()["busyScopes"] == 1, erased.text
    assert door.counts("alice", "bob") == (0, bob_count, bob_count)
    pending = redis_client.get(door.keys.dmail(scope))
    assert pending and door.keys.user_bytes("alice") not in json.loads(pending).values()

    # the session still names alice: a token of hers minted since the erasure still writes it (not the old one)
    minted = door.client.post("/v1/tokens", json={"userId": "alice"}, headers=door.operator)
    alice = {"Authorization": f"Bearer {minted.json()['token']}"}
    door.post("s-al", "context/messages", {"messages": [{"role": "user", "content": "y" * 1000}]}, alice)
    alice_count, _, tenant = door.counts("alice", "bob")
    assert tenant == alice_count + bob_count and alice_count > 1000
    assert door.post("s-al", "context/revert", {"checkpointId": 0}, alice)["messages"] == []
    assert door.counts("alice", "bob") == (0, bob_count, bob_count)

    redis_client.delete(lease)
    again = door.client.delete("/v1/users/alice", headers=door.operator)
    assert again.status_code == 200 and again.json()["busyScopes"] == 0, again.text
    assert door.counts("alice", "bob") == (0, bob_count, bob_count)
    assert _mentions(_dump(redis_client, keys), "alice") == []


def test_a_session_write_the_erasure_overtakes_stores_nothing(
    app_client: ClientFactory, redis_client: Redis, keys: BucketKeys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A context append and an artifact write in flight when their user is erased: the append's first read named
    the user, the erasure then deleted the session, and its retry (the script answered ``moved``) read no user
    and wrote the message with no owner; the artifact write's retry the same. No later erasure could find either
    (an audit). Now each answers 404 ``session_gone`` and stores nothing. The erasure is run inside the write, at
    the point where each had read the user."""
    from sessions.function_store import FunctionStore
    from sessions.store import SessionStore
    from worker.ops.erasure import erase_user

    gone = "u-erased-mid-write"
    client = app_client()
    producer = client.app.state.producer  # type: ignore[attr-defined]

    def erase() -> None:
        report = erase_user(
            producer.store, producer.keys, gone, session_scope=session_scope, erasers=producer.erasers
        )
        assert not report.busy_scopes

    real_keys, keys_fired = SessionStore._keys, []

    def keys_then_erase(self: SessionStore, session_id: str) -> tuple[list[str], str]:
        out = real_keys(self, session_id)
        if session_id == "s-append" and not keys_fired:
            keys_fired.append(1)
            erase()
        return out

    assert client.put("/v1/sessions/s-append", json={"userId": gone}).status_code == 200
    monkeypatch.setattr(SessionStore, "_keys", keys_then_erase)  # the user read: the erasure comes now
    answer = client.post(
        "/v1/sessions/s-append/context/messages",
        json={"messages": [{"role": "user", "content": "BRAVO-mid"}]},
    )
    assert (answer.status_code, answer.json()["error"]["code"]) == (404, "session_gone"), answer.text
    real_check = FunctionStore._check_artifacts
    fired: list[int] = []

    def artifact_then_erase(self: FunctionStore, *args: object) -> None:
        real_check(self, *args)  # type: ignore[arg-type]
        if not fired:
            fired.append(1)
            erase()

    assert client.put("/v1/sessions/s-artifact", json={"userId": gone}).status_code == 200
    monkeypatch.setattr(FunctionStore, "_check_artifacts", artifact_then_erase)
    answer = client.put("/v1/sessions/s-artifact/artifacts/plan", json={"content": "CHARLIE-mid"})
    assert (answer.status_code, answer.json()["error"]["code"]) == (404, "session_gone"), answer.text
    assert _mentions(_dump(redis_client, keys), "BRAVO-mid", "CHARLIE-mid", gone) == []


def test_a_tool_calls_record_after_the_erasure_is_not_stored(
    app_client: ClientFactory, redis_client: Redis, keys: BucketKeys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A D-Mail sent, then its user erased before the call's record was made: asking for the session's token
    (HSETNX) made its settings again, without the user, and the record (the D-Mail's text) was enqueued with no
    userId, out of every later erasure's reach (an audit). Now the record is refused, ``session_gone``."""
    from sessions.store import SessionStore
    from worker.ops.erasure import erase_user

    gone = "u-erased-before-the-record"
    client = app_client()
    producer = client.app.state.producer  # type: ignore[attr-defined]
    assert client.put("/v1/sessions/s-dmail", json={"userId": gone, "dmailEnabled": True}).status_code == 200
    assert client.post("/v1/sessions/s-dmail/context/checkpoint", json={}).status_code == 200
    real = SessionStore.record_identity

    def erased_first(self: SessionStore, session_id: str) -> object:
        report = erase_user(
            producer.store, producer.keys, gone, session_scope=session_scope, erasers=producer.erasers
        )
        assert not report.busy_scopes
        return real(self, session_id)

    monkeypatch.setattr(SessionStore, "record_identity", erased_first)
    answer = client.post(
        "/v1/sessions/s-dmail/dmail", json={"message": "DELTA-mid go back", "checkpoint_id": 0}
    )
    assert answer.headers.get("Agent-Signal-Record-Error") == "session_gone", (
        answer.status_code,
        answer.text,
    )
    assert _mentions(_dump(redis_client, keys), "DELTA-mid", gone) == []
