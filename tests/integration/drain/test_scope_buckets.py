"""Scope buckets (``AGENT_SIGNAL_SCOPE_BUCKETS``, worker/keys/buckets.py) on a real Redis with real workers.

A tenant spread over buckets must behave exactly as a tenant in one slot: the same events end done, every
staged write is applied once (those journaled to the home slot and the follow-ups journaled to other
buckets included), and the reads that fan out over the buckets (runs explorer pages, dead letters, counters,
scopes) give what one index would have given. The pipeline's own invariants with buckets on a Redis Cluster:
tests/integration/backends/test_redis_cluster_buckets.py.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from redis import Redis

from policies.self_iteration.keys import SelfIterationKeys
from producers import Producer
from tests.conftest import SettingsFactory, wait_for
from tests.support.waiting import outbox_settled
from worker.chain.outbox_records import OutboxRecord
from worker.core.errors import OverLimit, PermanentFailure
from worker.keys.buckets import bucket_of, slot_tag
from worker.keys.layout import BucketKeys, Keys
from worker.ops.runs import RunQuery, list_runs
from worker.ops.scope_control import list_scopes, pause_scope
from worker.outbox.journal_delivery import apply_deliverer, enqueue_deliverer
from worker.store.journal import JOURNAL_APPLY, JOURNAL_ENQUEUE
from worker.store.quotas import retained_counts

pytestmark = pytest.mark.integration

SCOPES = [f"topic:b-{i}" for i in range(12)]


def _fanout(i: int, targets: list[str]) -> dict[str, Any]:
    return {
        "sourceType": "test.fanout",
        "sourceId": f"fan-{i}",
        "scopeKey": SCOPES[i % len(SCOPES)],
        "payload": {"to": targets},
        "userId": "fan-user",
    }


@pytest.mark.parametrize("buckets", [1, 8])
def test_fanout_applies_every_write_once(
    buckets: int, make_settings: SettingsFactory, start_worker: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """24 events over 12 scopes, each emitting follow-ups to 3 other scopes: every event and follow-up ends
    done, the home counter counts 24, each follow-up's counter is 1, each scope's own counter its events.
    With 8 buckets most of that crossed slots through the journal; with 1 none did: the same answer. The
    retained-events quota and the user's share count the 24 events sent, not their follow-ups (a cluster audit:
    with buckets, the journal's follow-ups were counted, 4 units an event here)."""
    settings = make_settings(scope_buckets=buckets, tenant_max_events=10_000, user_max_events=10_000)
    start_worker(settings, concurrency=2)
    producer = Producer(settings)
    sent = [_fanout(i, [SCOPES[(i + d) % len(SCOPES)] for d in (1, 5, 7)]) for i in range(24)]
    results = producer.enqueue_many(sent)
    assert [r.status for r in results] == ["accepted"] * 24
    follow_ups = [(e["sourceId"], t) for e in sent for t in e["payload"]["to"]]
    if buckets > 1:  # the test exercises the journal: follow-ups cross buckets
        crossing = [
            t
            for e in sent
            for t in e["payload"]["to"]
            if bucket_of(t, buckets) != bucket_of(e["scopeKey"], buckets)
        ]
        assert len(crossing) > len(follow_ups) // 2

    def settled() -> bool:
        stats = producer.store.stats(producer.keys)
        return stats.get("done", 0) == 24 + len(follow_ups) and outbox_settled(producer.store)

    wait_for(settled, timeout_s=120, what=f"{24 + len(follow_ups)} events done and the outbox empty")
    home = keys.home_prefix
    assert redis_client.get(f"{home}test:fanout-home") == "24"
    pipe = redis_client.pipeline(transaction=False)
    for source_id, target in follow_ups:
        pipe.get(f"{home}test:fanout:{source_id}:{target}")
    counts = pipe.execute()
    assert counts == ["1"] * len(follow_ups), f"lost or doubled: {[c for c in counts if c != '1']}"
    bucketed = Keys(keys.prefix, keys.tenant, buckets)
    local = [redis_client.get(bucketed.plugin(scope, "fanout-local")) for scope in SCOPES]
    assert local == ["2"] * len(SCOPES)
    stats = producer.store.stats(producer.keys)
    assert (stats["accepted"], stats.get("dead", 0), stats.get("queued", 0)) == (24 + len(follow_ups), 0, 0)
    every = bucketed.every_bucket()
    counted = retained_counts(
        redis_client,
        [[b.retained_events for b in every], [b.retained_user_events("fan-user") for b in every]],
        settings.dedupe_window_s,
    )
    assert [units for units, _ in counted] == [24, 24]
    producer.close()


def test_a_journal_record_delivered_twice_applies_once(
    make_settings: SettingsFactory, redis_client: Redis
) -> None:
    """The relay may deliver a record twice (its claim ran out): the writes land once, the follow-up is
    stored once (the second time a duplicate), and a write that can never apply is refused whole."""
    settings = make_settings(scope_buckets=8)
    producer = Producer(settings)
    store = producer.store
    home = producer.keys.home_prefix
    record = OutboxRecord(
        id="journal:e1:commit:default",
        kind=JOURNAL_APPLY,
        key="journal:e1:commit:default",
        payload={"commands": [["INCR", f"{home}j:a"], ["RPUSH", f"{home}j:b", "x"]]},
        scope_key="topic:j",
        event_id="e1",
        created_at=0,
    )
    deliver = apply_deliverer(store, 60)
    deliver(record)
    deliver(record)
    assert (redis_client.get(f"{home}j:a"), redis_client.lrange(f"{home}j:b", 0, -1)) == ("1", ["x"])
    redis_client.set(f"{home}j:c", "text")
    bad = replace(
        record,
        id="journal:e2:commit:default",
        payload={"commands": [["INCR", f"{home}j:a"], ["HSET", f"{home}j:c", "f", "v"]]},
    )
    with pytest.raises(PermanentFailure, match=r"REFUSED .*WRONGTYPE") as refused:  # no retry changes it
        deliver(bad)
    assert refused.value.code == "JOURNAL_REFUSED"
    assert redis_client.get(f"{home}j:a") == "1", "a refused record wrote part of itself"
    # The same record id staged by another scope (two scopes' lanes can share an idempotency key) applies too.
    deliver(replace(record, scope_key="topic:other"))
    assert redis_client.get(f"{home}j:a") == "2"
    # A command that fails midway (INCR of a non-number passes the type check): what came before it stays,
    # and every later delivery fails too, so the record ends dead at once (a PermanentFailure: retried, it held up
    # the bucket's journal through every backoff) instead of being taken as delivered.
    broken = replace(
        record,
        id="journal:e3:commit:default",
        payload={"commands": [["INCR", f"{home}j:a"], ["INCR", f"{home}j:c"]]},
    )
    for _ in range(2):
        with pytest.raises(PermanentFailure, match="PARTIAL") as partial:
            deliver(broken)
        assert partial.value.code == "JOURNAL_PARTIAL"
    assert redis_client.get(f"{home}j:a") == "3"
    prepared = producer.emitter.validate(
        {
            "sourceType": "test.counter",
            "sourceId": "f-1",
            "scopeKey": "topic:far",
            "payload": {"counterKey": f"{home}j:d"},
        }
    )
    follow_up = OutboxRecord(
        id=f"follow-up:{prepared.event_id}",
        kind=JOURNAL_ENQUEUE,
        key=prepared.event_id,
        payload={
            "eventId": prepared.event_id,
            "scopeKey": prepared.scope_key,
            "sourceId": prepared.source_id,
            "body": prepared.body,
            "sourceType": prepared.source_type,
            "userId": None,
        },
        scope_key="topic:j",
        event_id="e1",
        created_at=0,
    )
    enqueue = enqueue_deliverer(producer.emitter)
    enqueue(follow_up)
    enqueue(follow_up)
    stats = store.stats(producer.keys)
    assert (stats["accepted"], stats["duplicate"]) == (1, 1)
    assert producer.status(prepared.event_id)["status"] == "queued"  # type: ignore[index]
    producer.close()


def test_reads_fan_out_over_the_buckets(
    make_settings: SettingsFactory, redis_client: Redis, keys: BucketKeys
) -> None:
    """Events of 16 scopes in 8 buckets: the runs explorer pages through all of them newest first with no
    gap or repeat (each page merges 8 indexes), counters and scopes are the buckets' sums and union, an
    event is found by its id alone, and every key of a scope shares one slot."""
    settings = make_settings(scope_buckets=8)
    producer = Producer(settings)
    scopes = [f"topic:r-{i}" for i in range(16)]
    assert len({bucket_of(s, 8) for s in scopes}) > 4
    events = [
        {
            "sourceType": "test.counter",
            "sourceId": f"r-{i}",
            "scopeKey": scopes[i % 16],
            "payload": {"counterKey": "x"},
        }
        for i in range(150)
    ]
    results = []
    for start in range(0, 150, 30):  # five batches: several enqueue times, many ties within one
        results += producer.enqueue_many(events[start : start + 30])
    ids = {r.event_id for r in results}
    assert len(ids) == 150
    store, tenant = producer.store, producer.keys
    pages, cursor = [], None
    while True:
        page = list_runs(store, tenant, RunQuery(limit=7, cursor=cursor))
        pages.append([e["eventId"] for e in page.events])
        cursor = page.cursor
        if cursor is None:
            break
    walked = [e for p in pages for e in p]
    assert len(walked) == len(set(walked)) == 150 and set(walked) == ids
    records = [store.get_event(tenant, e) for e in walked]
    order = [(r["enqueuedAt"], r["eventId"]) for r in records if r is not None]
    assert order == sorted(order, reverse=True)
    one_scope = list_runs(store, tenant, RunQuery(scope_key=scopes[3], limit=50))
    assert {e["eventId"] for e in one_scope.events} == {
        r.event_id for r, e in zip(results, events, strict=True) if e["scopeKey"] == scopes[3]
    }
    assert store.stats(tenant)["accepted"] == 150 and store.stats(tenant)["queued"] == 150
    assert sorted(store.active_scopes(tenant)) == sorted(scopes)
    assert pause_scope(store, tenant, scopes[0])
    assert {row["scopeKey"] for row in list_scopes(store, tenant, "paused")} == {scopes[0]}
    k = Keys(keys.prefix, keys.tenant, 8).for_scope(scopes[5])
    one_scope_keys = [
        k.inbox(scopes[5]),
        k.lease(scopes[5]),
        k.stats,
        k.dlq,
        k.scopes,
        k.runs("status", "done"),
        k.outbox_due,
        k.event("e"),
    ]
    assert len({slot_tag(key) for key in one_scope_keys}) == 1
    assert (
        slot_tag(SelfIterationKeys(k).memories("u")) == keys.tenant
    )  # user data stays in the tenant's home slot
    assert json.loads(json.dumps(store.dlq_list(tenant))) == []
    producer.close()


def test_journaled_writes_land_in_commit_order(
    make_settings: SettingsFactory, start_worker: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """120 events of one scope, committed in batches by two worker processes (each with its relay): their
    actions' RPUSH onto a list in the home slot is journaled, and the list ends in enqueue order, each once.
    Two scopes in different buckets interleave on another list; each scope's own entries keep their order."""
    settings = make_settings(scope_buckets=8, commit_batch_max=16)
    producer = Producer(settings)
    home = keys.home_prefix
    scopes = ["topic:order-a", "topic:order-b"]
    assert bucket_of(scopes[0], 8) != bucket_of(scopes[1], 8)

    def event(scope: str, i: int) -> dict[str, Any]:
        return {
            "sourceType": "test.batch",
            "sourceId": f"o-{scope[-1]}-{i}",
            "scopeKey": scope,
            "payload": {"counterKey": f"{home}test:order-counter"},
        }

    results = producer.enqueue_many([event(s, i) for i in range(60) for s in scopes])
    assert [r.status for r in results] == ["accepted"] * 120
    start_worker(settings)
    start_worker(settings)

    def settled() -> bool:
        return producer.store.stats(producer.keys).get("done", 0) == 120 and outbox_settled(producer.store)

    wait_for(settled, timeout_s=120, what="120 events done and the journal applied")
    order = redis_client.lrange(f"{home}test:batch-order", 0, -1)
    for scope in scopes:
        mine = [x for x in order if x.startswith(f"o-{scope[-1]}-")]
        assert mine == [f"o-{scope[-1]}-{i}" for i in range(60)], f"{scope}: {mine[:12]}…"
    assert redis_client.get(f"{home}test:order-counter") == "120"
    producer.close()


def test_a_batch_whose_later_bucket_fails_still_sends_the_earlier_buckets_drains(
    make_settings: SettingsFactory, redis_client: Redis, keys: BucketKeys
) -> None:
    """Two scopes in two buckets, the second bucket's scopes registry of the wrong type: its script refuses,
    the call fails, and the first bucket's event, already stored, has its drain message sent now (not left
    to the reconcile sweep)."""
    from worker.intake.source_event import StoreUnavailable

    settings = make_settings(scope_buckets=8)
    producer = Producer(settings)
    first, second = "topic:part-a", "topic:part-c"
    bucketed = Keys(keys.prefix, keys.tenant, 8)
    assert bucketed.for_scope(first).bucket != bucketed.for_scope(second).bucket
    redis_client.set(bucketed.for_scope(second).scopes, "not a set")
    queue = keys.broker_queue(settings.queue_name)
    assert redis_client.llen(queue) == 0
    events = [
        {
            "sourceType": "test.counter",
            "sourceId": f"part-{i}",
            "scopeKey": scope,
            "payload": {"counterKey": "x"},
        }
        for i, scope in enumerate((first, second))
    ]
    with pytest.raises(StoreUnavailable):
        producer.enqueue_many(events)
    assert producer.store.stats(producer.keys).get("accepted") == 1
    assert redis_client.llen(queue) >= 1, "the stored event's drain was not sent"
    producer.close()


def test_a_limit_refusing_a_later_bucket_says_what_the_earlier_buckets_stored(
    make_settings: SettingsFactory, redis_client: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cluster audit: with scope buckets a batch answered ``429 inbox_full`` had its other buckets' events
    stored and run, and the answer did not say so. The refusal now counts them (a resend answers them
    duplicate); a batch refused in its first bucket says nothing of the kind."""
    settings = make_settings(scope_buckets=8, max_inbox_depth=1)
    producer = Producer(settings)
    # the door's check of the buckets' sum passes two concurrent batches together; the buckets' scripts then
    # refuse: as if another batch had filled the inbox since
    monkeypatch.setattr(producer.store, "limits_refusal", lambda *_: None)
    full = "topic:inbox-full"
    other = next(s for s in SCOPES if bucket_of(s, 8) != bucket_of(full, 8))
    batch = [
        {
            "sourceType": "agent.user.message",
            "sourceId": "first",
            "scopeKey": other,
            "payload": {"message": "a"},
        },
        {"sourceType": "agent.user.message", "sourceId": "x1", "scopeKey": full, "payload": {"message": "b"}},
        {"sourceType": "agent.user.message", "sourceId": "x2", "scopeKey": full, "payload": {"message": "c"}},
    ]
    with pytest.raises(OverLimit) as refused:
        producer.enqueue_many(batch)
    assert "1 of its events, in other buckets, were stored" in refused.value.message
    stored = [len(producer.store.find_by_source(producer.keys, s)) for s in ("first", "x1", "x2")]
    assert stored == [1, 0, 0]
    with pytest.raises(OverLimit) as alone:
        producer.enqueue_many(batch[1:])
    assert "bucket by bucket" not in alone.value.message
    producer.close()


@pytest.mark.parametrize("buckets", [1, 4])
def test_a_journaled_follow_up_of_another_users_key_is_a_duplicate_as_the_commit_answers_it(
    buckets: int, make_settings: SettingsFactory
) -> None:
    """A review: the enqueue script refuses an event whose dedupe key is another user's, and the journal's
    follow-ups went through it: a follow-up so refused held its bucket's journal up, then went dead. It is
    answered ``duplicate``, as the commit's own admission answers it, and the other follow-ups are stored."""
    producer = Producer(make_settings(scope_buckets=buckets))
    first = {"sourceType": "agent.user.message", "sourceId": "fu-1", "scopeKey": "topic:fu", "payload": {}}
    assert producer.enqueue({**first, "userId": "u1"}).status == "accepted"
    other = producer.validate({**first, "userId": "u2"})
    fresh = producer.validate({**first, "sourceId": "fu-2", "userId": "u2"})
    outcomes = producer.emitter.admit([other, fresh])
    assert [(o.event_id, o.status) for o in outcomes] == [
        (other.event_id, "duplicate"),
        (fresh.event_id, "accepted"),
    ]
    producer.close()
