"""Procedure records live by day and count toward their user's stored bytes (an audit: one hash per scope, kept
alive by every write, held every tool outcome a busy scope ever had, 600 fields for 600 events, none counted).

The handlers run on a real Redis and their staged writes are applied as a commit would apply them."""

from __future__ import annotations

import json
import time
from typing import Any

from redis import Redis

from policies.self_iteration.deps import SelfIterationDeps
from policies.self_iteration.handlers.procedure import tool_outcome_procedure
from policies.self_iteration.keys import SelfIterationKeys
from policies.self_iteration.records.procedures import DAY_S, PROCEDURE_TTL_S, procedure_days
from worker.chain.context import Deps, EffectBuffer, HandlerContext
from worker.core.nodes import ChainRef, Source
from worker.keys.layout import BucketKeys
from worker.store.quotas import DAY_MS

SCOPE = "topic:tpc-procedures"


def _outcome(n: int, user: str) -> Source:
    return Source(
        source_id=f"tool-{n}",
        source_type="tool.outcome.completed",
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
    assert sorted(records) == [f"procedure-record:tool-{n}" for n in range(5)]
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
