"""Erasure after the dedupe window, on a real Redis with a real worker: the user's event index and their events'
records expire with the window, but what hangs off the user's scopes lives on (fences, counters and users' sets
without a TTL, idempotency lanes for days, an event waiting in a paused scope until it runs) and so does a chain
after its event's record. Erasure finds the scopes by the sets that name the user, the waiting events in their
inboxes, and an expired event's chain by the index while it lives; an erased dead event ends as ``erased``."""

from __future__ import annotations

from typing import Any

import pytest
from redis import Redis

from producers import Producer
from producers.sdk.dead_letters import discard_events, redrive_events
from sessions.store import session_scope
from tests.conftest import wait_for
from worker.keys.layout import BucketKeys, Keys
from worker.ops.erasure import erase_user
from worker.ops.runs import RunQuery, list_runs
from worker.ops.scope_control import pause_scope

pytestmark = [pytest.mark.integration, pytest.mark.buckets]

GONE, SECRET = "u-erase-late", "zebra-quartz"


def _send(producer: Producer, source_type: str, source_id: str, scope: str, **payload: Any) -> str:
    event = {"sourceType": source_type, "sourceId": source_id, "scopeKey": scope, "userId": GONE}
    return producer.enqueue({**event, "payload": {"note": SECRET, **payload}}).event_id


def _status(producer: Producer, event_id: str) -> str:
    return str((producer.status(event_id) or {}).get("status"))


def _erase(producer: Producer) -> Any:
    report = erase_user(
        producer.store, producer.keys, GONE, session_scope=session_scope, erasers=producer.erasers
    )
    assert report.busy_scopes == []
    return report


def _index_gone(redis_client: Redis, k: Keys) -> bool:
    return not any(redis_client.exists(b.user_events(GONE)) for b in k.every_bucket())


def test_the_users_scopes_are_found_and_dropped_after_their_events_have_expired(
    make_settings: Any, start_worker: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    settings = make_settings(dedupe_window_s=3)
    start_worker(settings)
    producer = Producer(settings)
    k, ran, waits = producer.keys, "topic:ran-long-ago", "topic:paused-long"
    done = _send(producer, "test.counter", "r1", ran, counterKey=f"{k.home_prefix}test:c-late")
    wait_for(lambda: _status(producer, done) == "done", what="the user's event")
    pause_scope(producer.store, k, waits)
    queued = _send(producer, "test.counter", "w1", waits, counterKey=f"{k.home_prefix}test:c-late")
    wait_for(lambda: _index_gone(redis_client, k), timeout_s=20, what="the user's index to expire")
    wait_for(
        lambda: _status(producer, done) == "None", timeout_s=20, what="the done event's record to expire"
    )

    def scope_keys() -> list[str]:
        found = redis_client.scan_iter(match=keys.all_pattern, count=1000)
        return sorted(key for key in found if f"{{{ran}}}" in key or f"{{{waits}}}" in key)

    before = scope_keys()
    families = {key.split("}:", 1)[1].split(":{", 1)[0] for key in before}
    assert {"fence", "seq", "scope-users", "idem", "inbox"} <= families, before

    _erase(producer)

    assert scope_keys() == []
    assert _status(producer, queued) == "erased"
    record = redis_client.hgetall(k.for_scope(waits).event(queued))
    assert record and not [v for v in record.values() if GONE in v or SECRET in v]
    assert int(producer.store.stats(k)["queued"]) == 0
    producer.close()


def test_the_chain_of_an_indexed_event_whose_record_has_expired_is_erased(
    make_settings: Any, start_worker: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """A chain outlives its event's record (chain retention against the window): the user's index, kept alive
    by a later event, still names the event, and erasure deletes its chain from there."""
    # the second event is sent with 2 s left of the first's record and keeps the index 6 s: the check after the
    # first record expires has 4 s to spare (with a 4 s window it had 2, and a loaded CI machine once missed it)
    settings = make_settings(dedupe_window_s=6)
    start_worker(settings)
    producer = Producer(settings)
    k, scope = producer.keys, "topic:chained"
    first = _send(producer, "test.counter", "c1", scope, counterKey=f"{k.home_prefix}test:c-chain")
    wait_for(lambda: _status(producer, first) == "done", what="the first event")
    b = k.for_scope(scope)
    wait_for(lambda: redis_client.ttl(b.event(first)) <= 2, timeout_s=10, what="2 s left of the first record")
    second = _send(producer, "test.counter", "c2", scope, counterKey=f"{k.home_prefix}test:c-chain")
    wait_for(lambda: not redis_client.exists(b.event(first)), timeout_s=10, what="the first record to expire")
    assert redis_client.exists(b.user_events(GONE)) and redis_client.exists(b.chain(first))
    wait_for(lambda: _status(producer, second) == "done", what="the second event")

    report = _erase(producer)

    assert not redis_client.exists(b.chain(first)) and not redis_client.exists(b.chain(second))
    assert report.removed["chains"] >= 2


@pytest.mark.parametrize("late", [False, True], ids=["within-the-window", "past-the-window"])
def test_an_erased_dead_event_is_erased_and_leaves_the_dead_letters(
    make_settings: Any, start_worker: Any, redis_client: Redis, keys: BucketKeys, late: bool
) -> None:
    """It stayed ``dead`` with no TTL and its payload gone: listed dead for good, neither redriven nor discarded
    usefully; past the window (the user's index gone, a dead record kept) it was not found at all."""
    settings = make_settings(max_attempts=1, dedupe_window_s=3)
    start_worker(settings)
    producer = Producer(settings)
    k, scope = producer.keys, "topic:dead-end"
    dead = _send(producer, "test.flaky", "d1", scope, errorText=SECRET)
    wait_for(lambda: _status(producer, dead) == "dead", timeout_s=60, what="the event to die")
    if late:
        wait_for(lambda: _index_gone(redis_client, k), timeout_s=20, what="the user's index to expire")

    _erase(producer)

    b = k.for_scope(scope)
    assert _status(producer, dead) == "erased"
    assert 0 < redis_client.ttl(b.event(dead)) <= 3
    record = redis_client.hgetall(b.event(dead))
    assert not [v for v in record.values() if GONE in v or SECRET in v]
    assert redis_client.zscore(b.dlq, dead) is None
    assert redis_client.zscore(b.runs("status", "dead"), dead) is None
    listed = list_runs(producer.store, k, RunQuery(status="dead")).events
    assert dead not in [e["eventId"] for e in listed]
    assert redrive_events(producer, [dead]) == {"redriven": [], "notDead": [dead]}
    assert discard_events(producer, [dead], "after the erasure") == {"discarded": [], "notDead": [dead]}
    assert _status(producer, dead) == "erased"
    producer.close()


def test_a_dead_outbox_record_of_the_users_scope_leaves_the_dead_list(make_settings: Any) -> None:
    """A dead outbox record is listed in its bucket's outbox-dead index by a member naming the record (and so a
    source id): erasing the user whose scope it is drops the entry with the record."""
    from worker.chain.context import EffectBuffer, HandlerContext
    from worker.outbox.dead import dead_page
    from worker.outbox.relay import OutboxRelay

    producer = Producer(make_settings())
    scope = f"topic:dead-outbox-{GONE}"
    _send(producer, "test.counter", "dead-outbox-1", scope, counterKey="unused")
    k = producer.keys.for_scope(scope)
    buffer = EffectBuffer(keys=k)
    HandlerContext(scope_key=scope, node_timestamp=1, keys=k, effects=buffer).outbox("hook", {}, key=SECRET)
    pipe = producer.store.client.pipeline(transaction=True)
    for command in buffer.to_json_list():
        pipe.execute_command(*command)
    pipe.execute()
    OutboxRelay(producer.store, {"hook": _refused}, max_attempts=1).run_once()
    assert dead_page(producer.store, producer.keys).total == 1
    _erase(producer)
    assert producer.store.client.zcard(k.outbox_dead) == 0  # gone, not only unlisted when a page meets it
    producer.close()


def _refused(record: Any) -> None:
    raise ConnectionError("the receiver is down")
