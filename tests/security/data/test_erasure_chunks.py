"""A shared scope's erasure in chunks (ERASE_SCOPE is called a chunk of the user's events at a time): the last
chunk scans the inbox once and rebuilds it without every chunk's tombstones (it was one LREM, a walk of the whole
inbox, per event). Real Redis, a paused scope so the events wait."""

from __future__ import annotations

from typing import Any

import pytest

from producers import Producer
from sessions.store import session_scope
from worker.ops import erasure
from worker.ops.scope_control import list_scopes, pause_scope

pytestmark = pytest.mark.integration

SCOPE = "topic:erasure-chunks"


def test_the_users_events_leave_a_shared_inbox_over_several_chunks(
    make_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(erasure, "CHUNK", 2)
    producer = Producer(make_settings())
    keys = producer.keys
    assert pause_scope(producer.store, keys, SCOPE)
    sent: dict[str, list[str]] = {"alice": [], "bob": []}
    for n, user in enumerate(["alice", "bob", "alice", "alice", "bob", "alice", "alice"]):
        event = {"sourceType": "test.counter", "sourceId": f"chunks-{n}", "scopeKey": SCOPE, "userId": user}
        sent[user].append(producer.enqueue({**event, "payload": {}}).event_id)
    report = erasure.erase_user(producer.store, keys, "alice", session_scope=session_scope)
    assert report.busy_scopes == [] and report.removed["eventPayloads"] == 5
    k = keys.for_scope(SCOPE)
    assert producer.store.client.lrange(k.inbox(SCOPE), 0, -1) == sent["bob"]  # in order, bob's only
    assert producer.store.stats(keys).get("queued") == 2
    assert all(producer.status(e)["status"] == "erased" for e in sent["alice"])  # type: ignore[index]
    producer.close()


def test_a_session_owners_scope_is_dropped_whole_once_both_users_are_erased(make_settings: Any) -> None:
    """Alice's event in a scope whose session names bob: her erasure keeps the scope shared and marks its users'
    set (the plugins' erasers must not take the scope for hers alone once she leaves it); bob's erasure then drops
    it whole (the mark counts for no one), as it did before the mark existed."""
    from sessions.store import SessionStore

    producer = Producer(make_settings())
    keys, client = producer.keys, producer.store.client
    SessionStore(client, keys).update_settings("owned", {"userId": "bob"})
    scope = session_scope("owned")
    k = keys.for_scope(scope)
    event = {"sourceType": "test.counter", "sourceId": "owned-alice", "scopeKey": scope, "userId": "alice"}
    producer.enqueue({**event, "payload": {}})
    erasure.erase_user(producer.store, keys, "alice", session_scope=session_scope)
    assert client.smembers(k.scope_users(scope)) == {"*shared"}  # kept: the session names bob
    report = erasure.erase_user(producer.store, keys, "bob", session_scope=session_scope)
    assert report.removed["scopes"] == 1 and not client.exists(k.scope_users(scope), k.inbox(scope))
    producer.close()


def test_an_operators_pause_outlives_an_erasure_that_drops_its_scope_whole(make_settings: Any) -> None:
    """A paused scope whose only events were the erased user's is dropped whole, and stays paused: the next
    event there waits. A paused scope whose key names the user (the id as a whole part of it) loses its pause
    with it: the paused hash holds the key. An operator race walk found the pause lifted, and the next event run."""
    producer = Producer(make_settings())
    keys = producer.keys
    theirs, a_word = "user:zed/inbox", "topic:zed-freeze"  # the id inside a word names nobody
    for scope in (SCOPE, theirs, a_word):
        assert pause_scope(producer.store, keys, scope)
        event = {
            "sourceType": "test.counter",
            "sourceId": f"pause-{scope}",
            "scopeKey": scope,
            "userId": "zed",
        }
        producer.enqueue({**event, "payload": {}})
    report = erasure.erase_user(producer.store, keys, "zed", session_scope=session_scope)
    assert report.busy_scopes == [] and report.removed["scopes"] == 3
    paused = {row["scopeKey"] for row in list_scopes(producer.store, keys, "paused")}
    assert paused == {SCOPE, a_word}
    producer.close()
