"""The COMMIT script on a real Redis, for an event alone (a run of one): staged writes and follow-up events apply
only with ``done``, and a staged write that cannot apply is refused before anything is written, leaving the
event at its inbox head."""

from __future__ import annotations

import time
from typing import Any

import pytest
from redis import Redis

from producers import Producer
from worker.chain.context import EffectBuffer
from worker.drain.lease import LeaseGrant, ScopeLease
from worker.keys.layout import BucketKeys
from worker.store.events import CommitReply, EventCommit, EventStore, PreparedEvent
from worker.store.replies import CommitCode

pytestmark = pytest.mark.integration

SCOPE = "topic:commit"


def _event(source_id: str, scope: str = SCOPE) -> dict[str, Any]:
    return {"sourceType": "bot.message.merged", "sourceId": source_id, "scopeKey": scope, "payload": {}}


def _setup(make_settings: Any) -> tuple[Producer, EventStore, ScopeLease]:
    producer = Producer(make_settings())
    store = producer.store
    return producer, store, ScopeLease(store.scripts, ttl_s=30, renew_interval_s=10, window_s=86_400)


def _take(lease: ScopeLease, keys: BucketKeys) -> tuple[LeaseGrant, str]:
    grant, _, head = lease.acquire(keys, SCOPE, now_ms=int(time.time() * 1000))
    lease.stop_renewing()
    assert grant is not None and head is not None and head.begun is not None
    return grant, head.begun.event_id


def _commit(
    store: EventStore,
    grant: LeaseGrant,
    event_id: str,
    outcome: Any,
    effects: EffectBuffer,
    follow: PreparedEvent,
) -> CommitReply:
    """COMMIT of the one event (a run of one), and its reply."""
    event = EventCommit(
        event_id=event_id,
        outcome=outcome,
        error="boom" if outcome != "done" else "",
        effects=effects,
        followups=[follow],
    )
    run = store.commit_run(
        store.commit_call(
            grant.keys, SCOPE, fence=grant.fence, token=grant.token, events=[event], go_on=[False]
        )
    )
    (reply,) = run.replies
    assert run.code is reply.code
    return reply


class TestOnlyDoneApplies:
    @pytest.mark.parametrize("outcome", ["retry", "dead"])
    def test_retry_and_dead_apply_nothing(
        self, outcome: str, make_settings: Any, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """A retried or dead event's staged writes and follow-ups are dropped by the script."""
        producer, store, lease = _setup(make_settings)
        producer.enqueue(_event("c1"))
        grant, event_id = _take(lease, keys)
        effects = EffectBuffer(keys=keys)
        effects.call("HINCRBY", keys.plugin(SCOPE, "probe"), "n", 1)
        follow = producer.validate(_event("f1", scope="topic:follow"))
        reply = _commit(store, grant, event_id, outcome, effects, follow)
        assert reply.code is CommitCode.COMMITTED and reply.publish == []
        assert redis_client.exists(keys.plugin(SCOPE, "probe"), keys.event(follow.event_id)) == 0
        producer.close()

    def test_done_applies_writes_and_admits_follow_ups(
        self, make_settings: Any, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """A done event's writes land, and its follow-up is admitted with a drain to publish for its scope; the
        reply counts it as accepted."""
        producer, store, lease = _setup(make_settings)
        producer.enqueue(_event("c2"))
        grant, event_id = _take(lease, keys)
        effects = EffectBuffer(keys=keys)
        effects.call("HINCRBY", keys.plugin(SCOPE, "probe"), "n", 1)
        follow = producer.validate(_event("f2", scope="topic:follow"))
        reply = _commit(store, grant, event_id, "done", effects, follow)
        assert reply.code is CommitCode.COMMITTED and reply.publish == [
            "default/topic:follow"
        ]  # scope refs: <tenant>/<scopeKey>
        assert redis_client.hget(keys.plugin(SCOPE, "probe"), "n") == "1"
        assert redis_client.hget(keys.event(follow.event_id), "state") == "queued"
        assert redis_client.lrange(keys.inbox("topic:follow"), 0, -1) == [follow.event_id]
        # the reply counts it (the worker's agent_signal_events_total{origin="follow_up"})
        assert (reply.followups_accepted, reply.followups_duplicate) == (1, 0)
        producer.close()


def test_a_wrong_type_write_is_refused_before_any_write(
    make_settings: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """HINCRBY on a string key: REFUSED naming the write, nothing applied, the event still at its inbox head."""
    producer, store, lease = _setup(make_settings)
    producer.enqueue(_event("c3"))
    grant, event_id = _take(lease, keys)
    redis_client.set(keys.plugin(SCOPE, "text"), "not a hash")
    effects = EffectBuffer(keys=keys)
    effects.call("SET", keys.plugin(SCOPE, "first"), "1")
    effects.call("HINCRBY", keys.plugin(SCOPE, "text"), "n", 1)
    follow = producer.validate(_event("f3", scope="topic:follow"))
    reply = _commit(store, grant, event_id, "done", effects, follow)
    assert reply.code is CommitCode.REFUSED and "#2" in reply.error and "WRONGTYPE" in reply.error
    assert redis_client.exists(keys.plugin(SCOPE, "first"), keys.event(follow.event_id)) == 0
    assert redis_client.lindex(keys.inbox(SCOPE), 0) == event_id
    assert redis_client.hget(keys.event(event_id), "state") == "processing"
    producer.close()


def test_the_pipeline_dead_letters_an_event_whose_write_is_refused(
    make_settings: Any, redis_client: Redis, keys: BucketKeys
) -> None:
    """End to end in-process: the activity plugin's counter key holds a string, so its HINCRBY is refused
    by APPLY; the event ends dead with the reason, and nothing else was written."""
    from worker.runtime.app import build_pipeline
    from worker.telemetry.recorder import DISABLED

    settings = make_settings()
    producer = Producer(settings)
    pipeline = build_pipeline(settings, telemetry=DISABLED)
    redis_client.set(keys.activity(SCOPE), "corrupt")
    accepted = producer.enqueue(_event("c4"))
    pipeline.drain_scope(SCOPE)
    record = producer.status(accepted.event_id)
    assert record is not None and record["status"] == "dead"
    assert "INVALID_EFFECT" in record["error"] and "WRONGTYPE" in record["error"]
    assert redis_client.get(keys.activity(SCOPE)) == "corrupt"
    producer.close()
