"""A bucket's journal (ordered outbox mode, scope buckets) settles a record only while its relay holds the journal
lock and only over a record that still exists (JOURNAL_SETTLE): it wrote the record back unconditionally, so an
erasure that deleted it mid-delivery saw the user's content come back with no TTL, and a relay that lost the lock
overwrote the result of the one that took over. The attempt is written before the delivery, so a relay that dies
mid-delivery still used it. Real Redis."""

from __future__ import annotations

from typing import Any

import pytest
from redis import Redis

from worker.core.errors import PermanentFailure
from worker.keys.layout import Keys
from worker.outbox.journal_delivery import apply_deliverer
from worker.outbox.relay import OutboxRecord, OutboxRelay
from worker.store.events import EventStore
from worker.store.journal import JOURNAL_APPLY, journaled

pytestmark = pytest.mark.integration

SCOPE = "topic:journal-settle"
SECRET = "alice's private memory text"


def _journal_one(redis_client: Redis, prefix: str, make_settings: Any) -> tuple[EventStore, Keys, str]:
    """One journal record (a write to the tenant's home slot from a scope in another bucket); its key."""
    store = EventStore(redis_client, make_settings(scope_buckets=4))
    keys = Keys(prefix, buckets=4)
    home = keys.plugin_home("memories", "alice")
    for command in journaled(keys, SCOPE, "evt_1", "lane:7", [["SET", home, SECRET]], 3600):
        redis_client.execute_command(*command)
    bucket = keys.for_scope(SCOPE)
    member = str(redis_client.zrange(bucket.journal_due, 0, 0)[0])
    return store, keys, OutboxRelay(store, {})._record_key(member)


def test_a_record_erased_mid_delivery_is_not_written_back(
    redis_client: Redis, prefix: str, make_settings: Any
) -> None:
    store, keys, record_key = _journal_one(redis_client, prefix, make_settings)
    due = keys.for_scope(SCOPE).journal_due

    def erased_then_fails(record: OutboxRecord) -> None:
        redis_client.delete(record_key)  # what erasure does to the user's outbox records
        raise ConnectionError("the replica wait timed out")

    OutboxRelay(store, {JOURNAL_APPLY: erased_then_fails}).run_once()
    assert redis_client.exists(record_key) == 0
    assert redis_client.zcard(due) == 0  # its due entry went with it: the journal is not held up


def test_the_attempt_is_counted_before_the_delivery_and_a_lost_lock_writes_nothing(
    redis_client: Redis, prefix: str, make_settings: Any
) -> None:
    store, keys, record_key = _journal_one(redis_client, prefix, make_settings)
    lock = keys.for_scope(SCOPE).journal_lock
    seen: list[int] = []

    def lock_lost_then_delivered(record: OutboxRecord) -> None:
        stored = OutboxRecord.from_json(redis_client.get(record_key) or "")
        seen.append(stored.attempts)  # written before this call
        redis_client.set(lock, "another relay")  # our lease ran out; another relay holds the bucket now

    OutboxRelay(store, {JOURNAL_APPLY: lock_lost_then_delivered}).run_once()
    stored = OutboxRecord.from_json(redis_client.get(record_key) or "")
    assert seen == [1]
    assert stored.state == "pending" and stored.attempts == 1  # the other relay settles it, not us
    assert 0 < redis_client.ttl(record_key)


def test_a_command_that_fails_midway_is_dead_at_once_and_the_journal_goes_on(
    redis_client: Redis, prefix: str, make_settings: Any
) -> None:
    """JOURNAL_APPLY's PARTIAL (a command failed after the ones before it were applied) is final: its marker
    keeps the answer, so a retry can only fail again. It was retried as a store error, ten attempts with the
    journal lock held through each backoff, and every later write of the bucket's journal waited behind it."""
    store = EventStore(redis_client, make_settings(scope_buckets=4))
    keys = Keys(prefix, buckets=4)
    home, behind = keys.plugin_home("memories", "alice"), keys.plugin_home("memories", "bob")
    redis_client.set(home, "not a number")
    for event_id, commands in (
        ("evt_1", [["SET", behind, "x"], ["INCR", home]]),
        ("evt_2", [["SET", behind, "y"]]),
    ):
        for command in journaled(keys, SCOPE, event_id, f"lane:{event_id}", commands, 3600):
            redis_client.execute_command(*command)
    bucket = keys.for_scope(SCOPE)
    first, second = (str(m) for m in redis_client.zrange(bucket.journal_due, 0, -1))
    relay = OutboxRelay(store, {JOURNAL_APPLY: apply_deliverer(store, 3600)})
    relay.run_once()
    dead = OutboxRecord.from_json(redis_client.get(relay._record_key(first)) or "")
    assert (dead.state, dead.attempts) == ("dead", 1)
    assert dead.last_error.startswith("PermanentFailure: PARTIAL command 2"), dead.last_error
    assert redis_client.zscore(bucket.outbox_dead, first) is not None  # listed, and can be redriven
    # the record behind it was applied in the same pass: nothing waited behind the dead one
    applied = OutboxRecord.from_json(redis_client.get(relay._record_key(second)) or "")
    assert applied.state == "delivered" and redis_client.get(behind) == "y"
    assert redis_client.zcard(bucket.journal_due) == 0


def test_a_partial_answer_is_final_with_wait_replicas_too(
    redis_client: Redis, prefix: str, make_settings: Any
) -> None:
    """With AGENT_SIGNAL_WAIT_REPLICAS the script runs in a pipeline with its WAIT, and redis-py words its error
    "Command # 1 (EVALSHA …) of pipeline caused error: PARTIAL …": read by its first word, the answer was not
    recognised and the record was retried as before (a review). The store now gives it in the script's own words
    (``EventStore.durable``), and the deliverer reads either."""
    store = EventStore(
        redis_client, make_settings(scope_buckets=4, wait_replicas=1, wait_replicas_timeout_ms=10)
    )
    keys = Keys(prefix, buckets=4)
    home = keys.plugin_home("memories", "alice")
    redis_client.set(home, "not a number")
    for command in journaled(keys, SCOPE, "evt_w", "lane:w", [["INCR", home]], 3600):
        redis_client.execute_command(*command)
    member = str(redis_client.zrange(keys.for_scope(SCOPE).journal_due, 0, 0)[0])
    relay = OutboxRelay(store, {JOURNAL_APPLY: apply_deliverer(store, 3600)})
    record = OutboxRecord.from_json(redis_client.get(relay._record_key(member)) or "")
    with pytest.raises(PermanentFailure, match=r"^PARTIAL command 1: ") as partial:
        apply_deliverer(store, 3600)(record)
    assert partial.value.code == "JOURNAL_PARTIAL"
