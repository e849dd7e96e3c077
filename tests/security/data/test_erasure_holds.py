"""Erasure and drains or enqueues that start while it runs, on a real Redis with a real worker: the erasure holds
each scope's lease from before it looks at the scope until it is done with it, and decides whole or shared in
the script that writes. A drain that starts mid-erasure cannot run (and so cannot apply) the erased user's event;
another user's event enqueued into a scope that was only the erased user's keeps that scope, stays queued and
runs."""

from __future__ import annotations

import json
from typing import Any

import pytest
from redis import Redis

import worker.ops.erasure as erasure
from producers import Producer
from sessions.store import session_scope
from tests.conftest import wait_for
from tests.security.data.test_erasure import _dump, _mentions
from worker.core.nodes import Action
from worker.documents.chain_codec import encode_chain
from worker.drain.pipeline import DrainOutcome
from worker.keys.layout import HOLDER_SEPARATOR, BucketKeys
from worker.ops.scope_control import pause_scope, resume_scope
from worker.runtime.app import build_pipeline
from worker.telemetry.recorder import DISABLED

pytestmark = [pytest.mark.integration]

GONE, OTHER, SECRET = "u-erase-race", "u-stays-race", "zebra-quartz"
# A lease long enough that the hook below, which holds the erasure up, stays well inside it.
SLOW_LEASE = {"lease_ttl_s": 6.0, "lease_renew_interval_s": 2.0}


def _counter(producer: Producer, source_id: str, scope: str, counter: str, **extra: Any) -> str:
    payload = {"counterKey": counter, **extra.pop("payload", {})}
    event = {
        "sourceType": "test.counter",
        "sourceId": source_id,
        "scopeKey": scope,
        "payload": payload,
        **extra,
    }
    return producer.enqueue(event).event_id


def test_a_drain_that_starts_mid_erasure_cannot_apply_the_erased_users_event(
    make_settings: Any,
    start_worker: Any,
    redis_client: Redis,
    keys: BucketKeys,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The scope is resumed (a drain published) after the erasure looked at it. The erasure used to check the
    lease once and tombstone later with nothing holding the scope: the drain ran the user's event meanwhile and
    its action applied after the erasure. Now the drain finds the erasure's lease, comes back after it, and
    finds the event erased."""
    settings = make_settings(**SLOW_LEASE)
    start_worker(settings)
    producer = Producer(settings)
    k, scope = producer.keys, "topic:shared-race"
    theirs_counter, mine_counter = f"{k.home_prefix}test:c-theirs", f"{k.home_prefix}test:c-{GONE}"
    pause_scope(producer.store, k, scope)
    _counter(producer, "n1", scope, theirs_counter)  # of nobody in particular: the scope is shared
    mine = _counter(
        producer, "m1", scope, mine_counter, userId=GONE, payload={"sleepMs": 1500, "note": SECRET}
    )
    running = f"{k.home_prefix}test:inaction:m1"
    looked = erasure._classify
    # A drain in this process, started while the erasure is mid-way: it runs the user's event unless the erasure
    # holds the scope (the worker, sent the resumed scope's drain, may try too; this one always does).
    mid_way = build_pipeline(settings, telemetry=DISABLED)
    tried: list[DrainOutcome] = []
    held_by: list[str] = []

    def classify_then_resume(*args: Any, **kwargs: Any) -> Any:
        out = looked(*args, **kwargs)
        resume_scope(producer.store, k, scope, producer.fair.publish)
        held_by.append(str(redis_client.get(k.for_scope(scope).lease(scope)) or ""))
        tried.append(mid_way.drain_scope(scope, holder="mid-erasure"))
        return out

    monkeypatch.setattr(erasure, "_classify", classify_then_resume)
    report = erasure.erase_user(
        producer.store, k, GONE, session_scope=session_scope, erasers=producer.erasers
    )
    assert report.busy_scopes == []
    # the drain tried and was refused: the scope's lease was the erasure's, and the drain ran nothing
    assert [held.split(HOLDER_SEPARATOR)[0] for held in held_by] == [erasure.HOLDER]
    assert [(t.processed, t.next) for t in tried] == [(0, "busy")]
    assert not redis_client.exists(running)
    wait_for(
        lambda: redis_client.get(theirs_counter) == "1", timeout_s=30, what="the scope to drain after it"
    )
    # settled: no lease and nothing queued, so whatever a drain took (the user's event too, had the erasure not
    # held the scope) has committed by now
    scoped = k.for_scope(scope)
    wait_for(
        lambda: not redis_client.exists(scoped.lease(scope)) and not redis_client.llen(scoped.inbox(scope)),
        timeout_s=30,
        what="the scope to settle",
    )
    assert not redis_client.exists(mine_counter) and not redis_client.exists(running)
    assert (producer.status(mine) or {}).get("status") == "erased"
    assert _mentions(_dump(redis_client, keys), GONE, SECRET) == []
    assert int(producer.store.stats(k)["queued"]) == 0
    producer.close()
    mid_way.store.client.close()


def test_another_users_event_enqueued_mid_erasure_keeps_the_scope_and_runs(
    make_settings: Any,
    start_worker: Any,
    redis_client: Redis,
    keys: BucketKeys,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The scope held only the erased user's events when the erasure looked; another user's event arrives
    before the scope is dropped. It used to be dropped with the inbox (never run, counted queued for good); the
    script that drops the scope now sees its user and keeps the scope as shared."""
    settings = make_settings(**SLOW_LEASE)
    start_worker(settings)
    producer = Producer(settings)
    k, scope = producer.keys, "topic:was-only-mine"
    theirs_counter = f"{k.home_prefix}test:c-{OTHER}"
    mine = _counter(
        producer, "m1", scope, f"{k.home_prefix}test:c-gone", userId=GONE, payload={"note": SECRET}
    )
    wait_for(lambda: (producer.status(mine) or {}).get("status") == "done", what="the user's event")
    pause_scope(producer.store, k, scope)  # so the late event waits in the inbox
    late: dict[str, str] = {}
    looked = erasure._classify

    def classify_then_enqueue(*args: Any, **kwargs: Any) -> Any:
        out = looked(*args, **kwargs)
        late["id"] = _counter(producer, "v1", scope, theirs_counter, userId=OTHER)
        return out

    monkeypatch.setattr(erasure, "_classify", classify_then_enqueue)
    erasure.erase_user(producer.store, k, GONE, session_scope=session_scope, erasers=producer.erasers)

    b = k.for_scope(scope)
    assert redis_client.lrange(b.inbox(scope), 0, -1) == [late["id"]]
    assert (producer.status(late["id"]) or {}).get("status") == "queued"
    assert redis_client.smembers(b.scope_users(scope)) == {OTHER}
    assert int(producer.store.stats(k)["queued"]) == 1
    assert _mentions(_dump(redis_client, keys), GONE, SECRET) == []
    resume_scope(producer.store, k, scope, producer.fair.publish)
    wait_for(lambda: redis_client.get(theirs_counter) == "1", timeout_s=30, what="the other user's event")
    # the effect commits before the event does (its applied signal runs between): the count moves at the latter
    wait_for(
        lambda: (producer.status(late["id"]) or {}).get("status") == "done", what="the late event's commit"
    )
    assert int(producer.store.stats(k)["queued"]) == 0
    producer.close()


def test_a_chain_stored_under_its_chain_id_stays_for_the_next_erasure_when_the_lease_is_lost(
    make_settings: Any, redis_client: Redis, keys: BucketKeys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chain of before chains were kept per event (stored under its chain id) was deleted before ERASE_SCOPE
    ran; when the script found the lease gone (a drain took it), nothing else was written, the scope was busy, and
    the next erasure no longer found the lanes that chain named. The script now deletes it with the event: a lost
    lease keeps both, and the next erasure takes them."""
    producer = Producer(make_settings())
    k, scope = producer.keys, "topic:legacy-chain"
    b = k.for_scope(scope)
    event_id = _counter(
        producer, "l1", scope, f"{k.home_prefix}test:c-legacy", userId=GONE, payload={"note": SECRET}
    )
    source_id = redis_client.hget(b.event(event_id), "sourceId")
    chain_key, lane = b.chain(f"chain:{source_id}"), b.idempotency(scope, "act-legacy")
    action = {
        "actionId": "act-legacy",
        "actionType": "action.test",
        "signal": {"signalId": "sig-legacy", "signalType": "signal.test"},
        "source": {"sourceId": source_id, "sourceType": "test.counter"},
        "chain": {"chainId": f"chain:{source_id}", "rootSourceId": source_id},
        "timestamp": 0,
        "payload": {"note": SECRET},
    }
    Action.model_validate(action)
    document = {"envelope": {"metadata": {"eventId": event_id}, "actions": [action]}}
    redis_client.set(chain_key, encode_chain(json.dumps(document).encode()), ex=600)
    redis_client.set(lane, SECRET, ex=600)
    looked = erasure._classify

    def classify_then_lose_the_lease(*args: Any, **kwargs: Any) -> Any:
        redis_client.set(
            b.lease(scope), "a-drain|took-it", px=600_000
        )  # as if the erasure paused past its TTL
        return looked(*args, **kwargs)

    monkeypatch.setattr(erasure, "_classify", classify_then_lose_the_lease)
    lost = erasure.erase_user(producer.store, k, GONE, session_scope=session_scope, erasers=producer.erasers)
    assert lost.busy_scopes == [scope]
    assert redis_client.exists(chain_key, lane) == 2

    monkeypatch.undo()
    redis_client.delete(b.lease(scope))
    report = erasure.erase_user(
        producer.store, k, GONE, session_scope=session_scope, erasers=producer.erasers
    )
    assert report.busy_scopes == [] and report.removed["lanes"] >= 1
    assert redis_client.exists(chain_key, lane) == 0
    assert _mentions(_dump(redis_client, keys), GONE, SECRET) == []
    producer.close()
