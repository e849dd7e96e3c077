"""Procedure records live by day and count toward their user's stored bytes (an audit: one hash per scope, kept
alive by every write, held every tool outcome a busy scope ever had, 600 fields for 600 events, none counted).

The handlers run on a real Redis and their staged writes are applied as a commit would apply them."""

from __future__ import annotations

import json
import time
from typing import Any

from redis import Redis

from policies.self_iteration.deps import SelfIterationDeps
from policies.self_iteration.handlers.procedure import should_suppress, tool_outcome_procedure
from policies.self_iteration.keys import SelfIterationKeys
from policies.self_iteration.records.procedures import DAY_S, PROCEDURE_TTL_S, procedure_days
from worker.chain.context import Deps, EffectBuffer, HandlerContext
from worker.core.nodes import ChainRef, Source
from worker.keys.layout import BucketKeys
from worker.store.quotas import DAY_MS

SCOPE = "topic:tpc-procedures"


def _outcome(n: int, user: str, source_type: str = "tool.outcome.completed") -> Source:
    return Source(
        source_id=f"tool-{n}",
        source_type=source_type,
        scope_key=SCOPE,
        timestamp=1,  # an event's own time: the records' day is the store's, not the caller's
        payload={"domainKey": "skill", "outcome": {"status": "succeeded"}, "tool": {"identifier": "notes"}},
        chain=ChainRef(chain_id=f"chain:tool-{n}", root_source_id=f"tool-{n}"),
        user_id=user,
    )


def _run(redis: Redis, keys: BucketKeys, source: Source) -> Any:
    ctx = HandlerContext(
        scope_key=SCOPE,
        node_timestamp=1,
        effects=EffectBuffer(keys=keys),
        keys=keys,
        deps_of=Deps({SelfIterationDeps: SelfIterationDeps(redis, True, None)}),
        source=source,
    )
    result = tool_outcome_procedure(source, ctx)
    for command in ctx.effects.commands:
        redis.execute_command(*command)
    return result


def test_records_go_to_todays_hash_which_expires_after_its_day_as_their_bytes_stop_counting(
    redis_client: Redis, keys: BucketKeys
) -> None:
    before = int(time.time())
    for n in range(5):
        _run(redis_client, keys, _outcome(n, "bob"))
    days = procedure_days(int(time.time()))
    k = SelfIterationKeys(keys)
    holding = {day: redis_client.hgetall(k.procedure(SCOPE, day)) for day in days}
    written = {day: records for day, records in holding.items() if records}
    assert list(written) in ([before // DAY_S], [before // DAY_S, before // DAY_S + 1])  # midnight between
    records = {f: v for r in written.values() for f, v in r.items()}
    assert sorted(json.loads(v)["id"] for v in records.values()) == [
        f"procedure-record:tool-{n}" for n in range(5)
    ]
    assert sorted(records) == [
        f"procedure-record:tool-{n}\x1fbob\x1ftool.outcome.completed" for n in range(5)
    ]
    (day, *_) = written
    ttl_s = redis_client.ttl(k.procedure(SCOPE, day))
    expires_s = (day + 1) * DAY_S + PROCEDURE_TTL_S  # the day's end plus the TTL, whenever it was written
    assert expires_s - int(time.time()) - 2 <= ttl_s <= expires_s - before
    # bob's bytes: the records' (field and value) counted in the day their hash expires in
    counted = {
        f: int(n) for f, n in redis_client.hgetall(keys.for_tenant("default").user_bytes("bob")).items()
    }
    size = sum(len(f.encode()) + len(v.encode()) for f, v in records.items())
    assert sum(counted.values()) == size and list(counted) in (
        [f"d{expires_s * 1000 // DAY_MS}"],
        [f"d{(expires_s - 1) * 1000 // DAY_MS}"],
    ), counted
    assert all(json.loads(v)["userId"] == "bob" for v in records.values())


def test_two_users_and_two_source_types_of_one_source_id_keep_a_record_each(
    redis_client: Redis, keys: BucketKeys
) -> None:
    """A derived-id walk: alice's completed tool outcome ``tc_1`` and bob's failed one of the same ``sourceId``
    in one shared scope wrote one field, ``procedure-record:tc_1``, and bob's record replaced alice's (her bytes
    still counted for it). Each keeps its own now, under LobeHub's id."""
    _run(redis_client, keys, _outcome(1, "alice"))
    _run(redis_client, keys, _outcome(1, "bob", "tool.outcome.failed"))
    _run(redis_client, keys, _outcome(1, "bob"))  # the same user, the other source type: a third event
    k = SelfIterationKeys(keys)
    records = [
        json.loads(v)
        for day in procedure_days(int(time.time()))
        for v in redis_client.hvals(k.procedure(SCOPE, day))
    ]
    assert sorted(r["userId"] for r in records) == ["alice", "bob", "bob"]
    assert {r["id"] for r in records} == {"procedure-record:tool-1"}


def _context(keys: BucketKeys, redis: Redis, user: str) -> HandlerContext:
    return HandlerContext(
        scope_key=SCOPE,
        node_timestamp=1,
        effects=EffectBuffer(keys=keys),
        keys=keys,
        deps_of=Deps({SelfIterationDeps: SelfIterationDeps(redis, True, None)}),
        source=_outcome(9, user),
    )


def test_a_users_handled_marker_suppresses_that_users_write_only(
    redis_client: Redis, keys: BucketKeys
) -> None:
    """A derived-id walk: alice's tool outcome carrying ``messageId: msg_bob_2`` marked the scope's procedure
    ``message:msg_bob_2`` handled, and bob's memory write for his own message ``msg_bob_2`` was suppressed. A
    marker is its user's now; one written before markers were (no user in its key) still suppresses, as before,
    for the 7 days it lives."""
    outcome = _outcome(2, "alice")
    outcome = outcome.model_copy(
        update={
            "payload": {
                "domainKey": "memory:user-preference",
                "intentClass": "explicit_persistence",
                "messageId": "msg_bob_2",
                "outcome": {"status": "succeeded"},
            }
        }
    )
    _run(redis_client, keys, outcome)
    asked = {"domain_key": "memory:user-preference", "candidates": ["explicit_persistence"]}
    proc = "message:msg_bob_2"
    assert should_suppress(_context(keys, redis_client, "alice"), proc=proc, **asked)
    assert not should_suppress(_context(keys, redis_client, "bob"), proc=proc, **asked)
    # a marker of an event of no user suppresses every user's (a review: as before markers were one user's)
    nobody = SelfIterationKeys(keys).procedure_marker(
        SCOPE, "memory:user-preference", "explicit_persistence", proc, None
    )
    redis_client.set(nobody, json.dumps({"markerType": "handled"}))
    assert should_suppress(_context(keys, redis_client, "bob"), proc=proc, **asked)
    redis_client.delete(nobody)
    assert not should_suppress(_context(keys, redis_client, "bob"), proc=proc, **asked)
    before = SelfIterationKeys(keys).procedure_marker_of_before(
        SCOPE, "memory:user-preference", "explicit_persistence", proc
    )
    redis_client.set(before, json.dumps({"markerType": "handled"}))
    assert should_suppress(_context(keys, redis_client, "bob"), proc=proc, **asked)
