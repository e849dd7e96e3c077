"""A batch admits each of its events exactly as a script of its own would (worker/store/lua/lib/admit.lua): the
batch only remembers what it already did per scope (the enqueue numbers taken with one INCRBY, the paused
answer, the drain marker, the scope's users) instead of asking Redis again for each event. Compared here with
the same events enqueued one per script, on a real Redis, through ENQUEUE and ENQUEUE_PUSH, with one scope
bucket and with four: every event's whole record but its enqueue time, whether it expires, every scope's inbox,
counter, marker and users, the scopes registry, the runs indexes' members, the stats, each event's outcome
and the drains published."""

from __future__ import annotations

from typing import Any

import pytest
from redis import Redis

from tests.conftest import SettingsFactory
from worker.core.dedupe import dedupe_key, event_id_for
from worker.core.tenancy import DEFAULT_TENANT
from worker.intake.emitter import Emitter
from worker.keys.layout import Keys
from worker.ops.scope_control import pause_scope
from worker.runtime.fair import FairQueue
from worker.store.events import EventStore

pytestmark = [pytest.mark.integration, pytest.mark.buckets]

SCOPES = ("topic:a", "topic:b", "topic:c", "topic:p")


def _event(source_id: str, scope: str, user: str | None = None) -> dict[str, Any]:
    event: dict[str, Any] = {
        "sourceType": "bot.message.merged",
        "sourceId": source_id,
        "scopeKey": scope,
        "payload": {"message": "hi"},
        "timestamp": 1_700_000_000_000,  # the body holds it: a default one is the clock's
    }
    if user is not None:
        event["userId"] = user
    return event


# Scope a: three events of two users and a repeat of its first (a duplicate inside the batch); scope b: two of
# nobody; scope c: one event stored before the batch, repeated in it, and a new one; scope p: paused, two events.
BEFORE = [_event("c0", "topic:c", "u3")]
BATCH = [
    _event("a0", "topic:a", "u1"),
    _event("b0", "topic:b"),
    _event("a1", "topic:a", "u2"),
    _event("p0", "topic:p", "u1"),
    _event("a0", "topic:a", "u1"),
    _event("c0", "topic:c", "u3"),
    _event("a2", "topic:a", "u1"),
    _event("b1", "topic:b"),
    _event("c1", "topic:c"),
    _event("p1", "topic:p", "u2"),
]


class Broker:
    """Records drain_next messages (ENQUEUE_PUSH's tickets)."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def send_task(self, name: str, args: Any = (), **options: Any) -> None:
        self.sent.append(name)


def _enqueue(
    store: EventStore, events: list[dict[str, Any]], *, one_per_script: bool, ready: bool
) -> tuple[list[str], list[str]]:
    """(each event's status, the scope refs a drain was sent for: published, or pushed on the ready list)."""
    published: list[str] = []
    fair = FairQueue(store.client, store.keys, Broker(), "q", messages_max=100, ticket_ttl_ms=60_000)
    emitter = Emitter(
        store.settings,
        store,
        published.append,
        ready=fair if ready else None,
        source_types=["bot.message.merged"],
    )
    emitter.enqueue([emitter.validate(e) for e in BEFORE])
    pause_scope(store, store.keys.for_tenant(DEFAULT_TENANT), "topic:p")
    statuses: list[str] = []
    prepared = [emitter.validate(e) for e in events]
    for batch in [[p] for p in prepared] if one_per_script else [prepared]:
        statuses += [r.status for r in emitter.enqueue(batch)]
    if ready:
        published += store.client.lrange(store.keys.ready(DEFAULT_TENANT), 0, -1)
    return statuses, published


def _state(client: Redis, store: EventStore, statuses: list[str], published: list[str]) -> dict[str, Any]:
    tenant: Keys = store.keys.for_tenant(DEFAULT_TENANT)
    events = {}
    for event in [*BEFORE, *BATCH]:
        source_id = event["sourceId"]
        event_id = event_id_for(dedupe_key(event["scopeKey"], event["sourceType"], source_id))
        key = store.locate(tenant, event_id).event(event_id)
        record = client.hgetall(key)
        record.pop("enqueuedAt")  # the clock's, the one field two runs cannot share
        events[source_id] = {**record, "expires": client.ttl(key) > 0}
    scopes = {}
    for scope in SCOPES:
        k = tenant.for_scope(scope)
        inbox = client.lrange(k.inbox(scope), 0, -1)
        scopes[scope] = {
            "inbox": [client.hget(k.event(i), "sourceId") for i in inbox],
            "seq": client.get(k.enqueue_seq(scope)),
            "marked": bool(client.exists(k.scheduled(scope))),
            "users": sorted(client.smembers(k.scope_users(scope))),
            "registered": any(
                client.sismember(b.scopes, f"{DEFAULT_TENANT}/{scope}") for b in tenant.every_bucket()
            ),
        }
    indexes: dict[str, list[str]] = {}
    for b in tenant.every_bucket():
        for name in ("runs:type:bot.message.merged", "runs:status:active", "runs:types"):
            key = f"{b.bucket_prefix}{name}"
            indexes[f"{b.bucket}/{name}"] = sorted(client.zrange(key, 0, -1))
        for key in client.scan_iter(match=f"{b.bucket_prefix}by-source:*"):
            indexes[key.removeprefix(b.bucket_prefix)] = sorted(client.zrange(key, 0, -1))
        for user in ("u1", "u2", "u3"):
            indexes[f"{b.bucket}/user {user}"] = sorted(client.zrange(b.user_events(user), 0, -1))
    for scope in SCOPES:
        indexes[scope] = sorted(client.zrange(tenant.for_scope(scope).runs_of_scope(scope), 0, -1))
    stats = store.stats(tenant)
    counts = {name: stats.get(name, 0) for name in ("accepted", "duplicate", "queued")}
    return {
        "statuses": statuses,
        "published": sorted(published),
        "indexes": indexes,
        "events": events,
        "scopes": scopes,
        "stats": counts,
    }


@pytest.mark.parametrize("ready", [False, True], ids=["ENQUEUE", "ENQUEUE_PUSH"])
def test_a_batch_ends_in_the_state_of_one_script_per_event(
    redis_client: Redis, prefix: str, make_settings: SettingsFactory, ready: bool
) -> None:
    states = []
    for one_per_script in (False, True):
        store = EventStore(redis_client, make_settings(key_prefix=f"{prefix}{int(one_per_script)}:"))
        statuses, published = _enqueue(store, BATCH, one_per_script=one_per_script, ready=ready)
        states.append(_state(redis_client, store, statuses, published))
    batch, alone = states
    assert batch == alone
    # and the state is the one intended, not two equally wrong ones
    assert batch["statuses"] == ["accepted"] * 4 + ["duplicate"] * 2 + ["accepted"] * 4
    # a drain for each scope the batch made ready (c's was sent before it), none for the paused one
    assert batch["published"] == [f"{DEFAULT_TENANT}/topic:{s}" for s in "abc"]
    assert [batch["events"][s]["seq"] for s in ("a0", "a1", "a2")] == ["1", "2", "3"]
    assert batch["events"]["c1"]["seq"] == "2" and batch["events"]["c0"]["duplicates"] == "1"
    # a queued event has no TTL: it must not expire before it runs (it gets the dedupe window when it ends)
    assert batch["events"]["a0"]["duplicates"] == "1" and not batch["events"]["a0"]["expires"]
    assert len(batch["indexes"]["topic:a"]) == 3 and batch["events"]["a1"]["userId"] == "u2"
    a, p = batch["scopes"]["topic:a"], batch["scopes"]["topic:p"]
    assert a == {
        "inbox": ["a0", "a1", "a2"],
        "seq": "3",
        "marked": True,
        "users": ["u1", "u2"],
        "registered": True,
    }
    assert (
        p["inbox"] == ["p0", "p1"] and not p["marked"] and not p["registered"] and p["users"] == ["u1", "u2"]
    )
    assert batch["scopes"]["topic:b"]["users"] == ["*"] and batch["scopes"]["topic:b"]["seq"] == "2"
    assert batch["stats"] == {"accepted": 9, "duplicate": 2, "queued": 9}  # c0 before, 8 in the batch


def test_the_next_batch_numbers_on_from_the_last(redis_client: Redis, make_settings: SettingsFactory) -> None:
    """A batch takes its scope's numbers with one INCRBY: the next batch goes on from the last of them."""
    store = EventStore(redis_client, make_settings())
    emitter = Emitter(store.settings, store, lambda ref: None, source_types=["bot.message.merged"])
    for tag in ("x", "y"):
        emitter.enqueue([emitter.validate(_event(f"{tag}{i}", "topic:n")) for i in range(3)])
    tenant = store.keys.for_tenant(DEFAULT_TENANT)
    k = tenant.for_scope("topic:n")
    ids = redis_client.lrange(k.inbox("topic:n"), 0, -1)
    assert [redis_client.hget(k.event(i), "seq") for i in ids] == ["1", "2", "3", "4", "5", "6"]
    assert redis_client.get(k.enqueue_seq("topic:n")) == "6"
