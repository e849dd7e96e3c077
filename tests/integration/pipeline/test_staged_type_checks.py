"""The type checks of staged writes (worker/store/lua/lib/staged.lua) on a private real Redis, through COMMIT runs:
a key a run's events all write is checked with TYPE once per script, not once per event (issue 29); what the
script learnt from a write never lets a later write of another type through."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from producers import Producer
from tests.support.private_redis import private_redis
from worker.chain.context import EffectBuffer
from worker.drain.lease import ScopeLease
from worker.keys.layout import BucketKeys
from worker.store.events import EventCommit, RunReply
from worker.store.replies import CommitCode

pytestmark = pytest.mark.integration

SCOPE = "topic:staged"


def _run(producer: Producer, staged: list[list[list[Any]]], client: Redis) -> tuple[RunReply, int]:
    """Enqueue one event per list of staged commands, take the scope and commit them as one run; and the TYPE
    commands the commit ran."""
    keys = BucketKeys(producer.settings.key_prefix)
    for i in range(len(staged)):
        producer.enqueue(
            {"sourceType": "bot.message.merged", "sourceId": f"s{i}", "scopeKey": SCOPE, "payload": {}}
        )
    lease = ScopeLease(producer.store.scripts, ttl_s=30, renew_interval_s=10, window_s=86_400)
    grant, _, head = lease.acquire(keys, SCOPE, now_ms=int(time.time() * 1000))
    lease.stop_renewing()
    assert grant is not None and head is not None
    ids = producer.store.client.lrange(keys.inbox(SCOPE), 0, -1)
    events = []
    for event_id, commands in zip(ids, staged, strict=True):
        effects = EffectBuffer(keys=keys)
        for command in commands:
            effects.call(*command)
        events.append(EventCommit(event_id=str(event_id), outcome="done", error="", effects=effects))
    go_on = [True] * (len(events) - 1) + [False]
    before = _type_calls(client)
    store = producer.store
    run = store.commit_run(
        store.commit_call(grant.keys, SCOPE, fence=grant.fence, token=grant.token, events=events, go_on=go_on)
    )
    return run, _type_calls(client) - before


def _type_calls(client: Redis) -> int:
    return int(client.info("commandstats").get("cmdstat_type", {}).get("calls", 0))


def test_a_key_every_event_writes_is_type_checked_once_per_run(make_settings: Any, tmp_path: Path) -> None:
    """Five events, each an HINCRBY on the scope's counter: one TYPE in the script, and every write applied."""
    with private_redis(tmp_path) as url:
        producer = Producer(make_settings(redis_url=url))
        client = Redis.from_url(url, decode_responses=True)
        counter = BucketKeys(producer.settings.key_prefix).plugin(SCOPE, "counter")
        run, types = _run(producer, [[["HINCRBY", counter, "n", 1]] for _ in range(5)], client)
        assert run.code is CommitCode.COMMITTED and len(run.replies) == 5
        assert client.hget(counter, "n") == "5"
        assert types == 1
        producer.close()
        client.close()


def test_what_a_run_learnt_of_a_key_never_lets_a_write_of_another_type_through(
    make_settings: Any, tmp_path: Path
) -> None:
    """A SETNX that wrote nothing (the key is a hash) teaches nothing: the next event's SET on that hash is
    refused as before, after the first event was committed. A DEL forgets the key's type: a SET after it
    applies."""
    with private_redis(tmp_path) as url:
        producer = Producer(make_settings(redis_url=url))
        client = Redis.from_url(url, decode_responses=True)
        keys = BucketKeys(producer.settings.key_prefix)
        shape, gone = keys.plugin(SCOPE, "shape"), keys.plugin(SCOPE, "gone")
        run, _ = _run(
            producer,
            [
                [["HSET", shape, "f", "v"], ["SETNX", shape, "x"], ["HSET", gone, "f", "v"], ["DEL", gone]],
                [["SET", gone, "now a string"]],
                [["SET", shape, "y"]],
            ],
            client,
        )
        assert run.code is CommitCode.REFUSED
        assert [r.code for r in run.replies] == [
            CommitCode.COMMITTED,
            CommitCode.COMMITTED,
            CommitCode.REFUSED,
        ]
        assert (
            "WRONGTYPE: SET needs a string" in run.replies[-1].error
            and "holds a hash" in run.replies[-1].error
        )
        assert client.type(shape) == "hash" and client.get(gone) == "now a string"
        producer.close()
        client.close()


def test_a_staged_receipt_trims_its_indexes_of_expired_members(make_settings: Any, tmp_path: Path) -> None:
    """A receipt written by a handler (staged effects, committed by COMMIT) drops from the user's index and the
    agent/topic one the members created more than the retention before it (ZREMRANGEBYSCORE is a stageable zset
    write): each new receipt refreshed the indexes' TTL and kept every expired member, so an active user's
    indexes grew for good."""
    from worker.store.receipts import receipt_effects

    with private_redis(tmp_path) as url:
        producer = Producer(make_settings(redis_url=url))
        client = Redis.from_url(url, decode_responses=True)
        keys = BucketKeys(producer.settings.key_prefix)

        def receipt(rid: str, at: int) -> list[list[Any]]:
            body = {
                "id": rid,
                "kind": "review",
                "createdAt": at,
                "userId": "carol",
                "agentId": "a",
                "topicId": "t",
            }
            return [list(c) for c in receipt_effects(keys, body, 60)]

        run, _ = _run(producer, [receipt("r0", 0), receipt("r30", 30_000), receipt("r90", 90_000)], client)
        assert run.code is CommitCode.COMMITTED
        for index in (keys.user_receipts("carol"), keys.receipt_index("carol", "a", "t")):
            assert client.zrange(index, 0, -1) == ["r30", "r90"], index
        producer.close()
        client.close()
