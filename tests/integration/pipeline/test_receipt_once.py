"""A staged receipt whose id its user already has adds nothing (EffectBuffer.call_once and staged.lua's THEN): its
indexes, its user's stored-bytes count and its announcement follow its SET NX and run only when that writes. They
had no condition, so a second receipt of one id from another action lane counted its bytes twice and announced
itself again, although the receipt itself stayed the first one. Real Redis: a commit in one slot, and a journal
record delivered to the home slot where a tenant spans scope buckets."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from producers import Producer
from tests.support.private_redis import private_redis
from worker.chain.context import EffectBuffer
from worker.drain.lease import ScopeLease
from worker.keys.layout import BucketKeys, Keys
from worker.outbox.journal_delivery import apply_deliverer
from worker.outbox.relay import OutboxRelay
from worker.store.events import EventCommit, EventStore
from worker.store.journal import JOURNAL_APPLY, journaled
from worker.store.receipts import receipt_effects
from worker.store.replies import CommitCode

pytestmark = pytest.mark.integration

SCOPE = "topic:receipt-once"


def _receipt(keys: Keys, text: str) -> list[list[str | int]]:
    body = {"id": "msg_1:review", "kind": "review", "createdAt": 1_000, "userId": "carol", "text": text}
    return receipt_effects(keys, body, 3600, event_id="evt_x")


def _publishes(client: Redis) -> int:
    return int(client.info("commandstats").get("cmdstat_publish", {}).get("calls", 0))


def test_a_second_receipt_of_one_id_in_a_commit_counts_and_announces_nothing(
    make_settings: Any, tmp_path: Path
) -> None:
    with private_redis(tmp_path) as url:
        producer = Producer(make_settings(redis_url=url))
        client = Redis.from_url(url, decode_responses=True)
        keys = BucketKeys(producer.settings.key_prefix)
        for i in range(2):
            producer.enqueue(
                {"sourceType": "bot.message.merged", "sourceId": f"s{i}", "scopeKey": SCOPE, "payload": {}}
            )
        lease = ScopeLease(producer.store.scripts, ttl_s=30, renew_interval_s=10, window_s=86_400)
        grant, _, head = lease.acquire(keys, SCOPE, now_ms=int(time.time() * 1000))
        lease.stop_renewing()
        assert grant is not None and head is not None
        events = []
        for event_id, text in zip(client.lrange(keys.inbox(SCOPE), 0, -1), ("first", "second"), strict=True):
            effects = EffectBuffer(keys=keys)
            effects.call_once(*_receipt(keys, text))
            events.append(EventCommit(event_id=str(event_id), outcome="done", error="", effects=effects))
        before = _publishes(client)
        run = producer.store.commit_run(
            producer.store.commit_call(
                grant.keys, SCOPE, fence=grant.fence, token=grant.token, events=events, go_on=[True, False]
            )
        )
        assert [r.code for r in run.replies] == [CommitCode.COMMITTED, CommitCode.COMMITTED]
        stored = client.get(keys.receipt("carol", "msg_1:review"))
        assert stored is not None and json.loads(stored)["text"] == "first"
        assert _publishes(client) - before == 1
        one = len(stored.encode("utf-8"))
        counted = client.hgetall(keys.user_bytes("carol"))
        assert sum(int(v) for v in counted.values()) == one, counted
        assert client.zrange(keys.user_receipts("carol"), 0, -1) == ["msg_1:review"]
        producer.close()
        client.close()


def test_a_journaled_receipt_delivered_twice_under_two_labels_counts_once(
    redis_client: Redis, prefix: str, make_settings: Any
) -> None:
    """Two lanes of a scope in another bucket than the tenant's home slot stage one receipt: each becomes an
    ``engine.apply`` record of its own, and the second applies nothing of it."""
    store = EventStore(redis_client, make_settings(scope_buckets=4))
    keys = Keys(prefix, buckets=4)
    home = keys.for_tenant(keys.tenant)
    for label, text in (("lane:1", "first"), ("lane:2", "second")):
        effects = EffectBuffer(keys=keys.for_scope(SCOPE))
        effects.call_once(*_receipt(home, text))
        staged = effects.to_json_list()
        local = journaled(keys, SCOPE, "evt_1", label, [list(c) for c in staged], 3600)
        assert local != staged  # the receipt's slot is not the scope's: it went through the journal
        for command in local:
            redis_client.execute_command(*command)
    OutboxRelay(store, {JOURNAL_APPLY: apply_deliverer(store, 3600)}).run_once()
    stored = redis_client.get(home.receipt("carol", "msg_1:review"))
    assert stored is not None and json.loads(stored)["text"] == "first"
    counted = redis_client.hgetall(home.user_bytes("carol"))
    assert sum(int(v) for v in counted.values()) == len(stored.encode("utf-8")), counted
    assert redis_client.zcard(keys.for_scope(SCOPE).journal_due) == 0  # both delivered
