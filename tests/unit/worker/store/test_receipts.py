"""Receipts belong to one user (worker/store/receipts.py): keys, listing across agents and topics, the runs that
produced them, and the move of receipts stored before they were keyed by user. Real Redis."""

from __future__ import annotations

import json
import time
from typing import Any

from redis import Redis

from worker.keys.layout import BucketKeys
from worker.store.receipts import ReceiptStore, migrate_legacy_receipts


def _receipt(
    rid: str, user: str, at: int, *, agent: str = "a1", topic: str = "t1", **extra: Any
) -> dict[str, Any]:
    return {"id": rid, "kind": "memory", "status": "applied", "title": rid, "createdAt": at, "userId": user,
            "agentId": agent, "topicId": topic, **extra}  # fmt: skip


class TestOwnership:
    def test_two_users_receipts_of_one_id_are_two_receipts(
        self, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """One LobeHub id for two users: both append, each reads their own; a second append of one is refused."""
        store = ReceiptStore(redis_client, keys, ttl_s=60)
        assert store.append(_receipt("msg_1:memory", "alice", 1, detail="tea"))
        assert store.append(_receipt("msg_1:memory", "bob", 2, detail="coffee"))
        assert not store.append(_receipt("msg_1:memory", "bob", 3, detail="planted"))
        assert (store.get("alice", "msg_1:memory") or {})["detail"] == "tea"
        assert (store.get("bob", "msg_1:memory") or {})["detail"] == "coffee"
        assert store.owners_of("msg_1:memory") == ["alice", "bob"]

    def test_a_body_of_another_user_in_an_index_is_never_listed(
        self, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """LobeHub's guard: a listing keeps only the receipts whose user, agent and topic match the query."""
        store = ReceiptStore(redis_client, keys, ttl_s=60)
        redis_client.set(keys.receipt("alice", "x"), json.dumps(_receipt("x", "bob", 5)))
        redis_client.zadd(keys.user_receipts("alice"), {"x": 5})
        assert store.list(user_id="alice") == ([], None)


class TestListing:
    def test_user_alone_lists_every_agent_and_topic_newest_first(
        self, redis_client: Redis, keys: BucketKeys
    ) -> None:
        store = ReceiptStore(redis_client, keys, ttl_s=60)
        for i, (agent, topic) in enumerate([("a1", "t1"), ("a2", "t2"), ("a1", "t3"), ("a2", "t1")]):
            store.append(_receipt(f"r{i}", "u1", 100 + i, agent=agent, topic=topic))
        store.append(_receipt("other", "u2", 200))
        assert [r["id"] for r in store.list(user_id="u1")[0]] == ["r3", "r2", "r1", "r0"]
        assert [r["id"] for r in store.list(user_id="u1", agent_id="a1")[0]] == ["r2", "r0"]
        assert [r["id"] for r in store.list(user_id="u1", topic_id="t1")[0]] == ["r3", "r0"]
        assert [r["id"] for r in store.list(user_id="u1", agent_id="a2", topic_id="t2")[0]] == ["r1"]

    def test_pages_with_a_filter_follow_the_cursor_through_equal_times(
        self, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """Pages of 2 over 7 matching receipts among others, several sharing one createdAt: each once, in order."""
        store = ReceiptStore(redis_client, keys, ttl_s=60)
        for i in range(14):
            store.append(_receipt(f"r{i:02d}", "u1", 100 + i // 3, agent="a1" if i % 2 else "a2"))
        expected = [r["id"] for r in store.list(user_id="u1", agent_id="a1", limit=50)[0]]
        assert len(expected) == 7
        seen: list[str] = []
        cursor = None
        while True:
            page, cursor = store.list(user_id="u1", agent_id="a1", limit=2, cursor=cursor)
            seen += [r["id"] for r in page]
            if cursor is None:
                break
        assert seen == expected

    def test_a_page_after_a_receipt_that_left_the_index_skips_only_what_was_shown(
        self, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """The cursor's receipt expired (or was erased) before the next page: the entries sharing its time that
        were not shown yet still come; every one of them was skipped."""
        store = ReceiptStore(redis_client, keys, ttl_s=60)
        for i in range(5):
            store.append(_receipt(f"r{i}", "u1", 100))
        page, cursor = store.list(user_id="u1", limit=2)
        assert [r["id"] for r in page] == ["r4", "r3"] and cursor == "100:r3"
        redis_client.zrem(keys.user_receipts("u1"), "r3")
        redis_client.delete(keys.receipt("u1", "r3"))
        assert [r["id"] for r in store.list(user_id="u1", limit=10, cursor=cursor)[0]] == ["r2", "r1", "r0"]

    def test_the_runs_that_produced_a_receipt_list_it(self, redis_client: Redis, keys: BucketKeys) -> None:
        """Indexed under the event whose chain appended it and the agent run (operation) that reported it."""
        store = ReceiptStore(redis_client, keys, ttl_s=60)
        store.append(_receipt("r1", "u1", 1, operationId="op_1"), event_id="evt_completion")
        store.append(_receipt("r2", "u1", 2, operationId="op_2"))
        assert [r["id"] for r in store.produced_by("u1", ["evt_completion"])] == ["r1"]
        assert [r["id"] for r in store.produced_by("u1", ["evt_x", "op_1", "op_2"])] == ["r2", "r1"]
        assert store.produced_by("u2", ["op_1"]) == []


class TestMigration:
    def test_legacy_receipts_move_to_their_user_once(self, redis_client: Redis, keys: BucketKeys) -> None:
        """receipt:<id> (before receipts were keyed by user) moves to receipt:<user>:<id> with its TTL and
        indexes; a second run moves nothing; a dry run changes nothing."""
        legacy = _receipt("msg_1:memory:msg_1", "u1", 7, operationId="op_1")
        old_key = keys.receipt_prefix + legacy["id"]
        redis_client.set(old_key, json.dumps(legacy), ex=500)
        redis_client.zadd(keys.receipt_index("u1", "a1", "t1"), {legacy["id"]: 7})
        assert migrate_legacy_receipts(redis_client, keys, ttl_s=60, dry_run=True) == 1
        assert redis_client.exists(old_key)
        assert migrate_legacy_receipts(redis_client, keys, ttl_s=60) == 1
        assert not redis_client.exists(old_key)
        store = ReceiptStore(redis_client, keys, ttl_s=60)
        assert store.get("u1", legacy["id"]) == legacy
        assert 400 < int(redis_client.ttl(keys.receipt("u1", legacy["id"]))) <= 500
        assert [r["id"] for r in store.list(user_id="u1")[0]] == [legacy["id"]]
        assert [r["id"] for r in store.produced_by("u1", ["op_1"])] == [legacy["id"]]
        assert migrate_legacy_receipts(redis_client, keys, ttl_s=60) == 0

    def test_a_migrated_receipt_never_shortens_its_users_indexes(
        self, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """A legacy receipt with 2 minutes left keeps its 2 minutes, but the user's index, the agent/topic index and
        the operation index (which hold the user's newer receipts too) keep the full retention (an hour), not the
        old receipt's 2 minutes: the newer receipt is still listed once the old one has gone. (The old receipt
        lives well past the test, so a slow machine lists both.)"""
        store = ReceiptStore(redis_client, keys, ttl_s=3600)
        now = int(time.time() * 1000)
        assert store.append(_receipt("new:memory", "u1", now, operationId="op_1"))
        legacy = _receipt("old:memory", "u1", now - 3_000_000, operationId="op_1")
        redis_client.set(keys.receipt_prefix + legacy["id"], json.dumps(legacy), ex=120)

        assert migrate_legacy_receipts(redis_client, keys, ttl_s=3600) == 1

        assert 0 < int(redis_client.ttl(keys.receipt("u1", legacy["id"]))) <= 120
        for index in (
            keys.user_receipts("u1"),
            keys.receipt_index("u1", "a1", "t1"),
            keys.operation_receipts("u1", "op_1"),
        ):
            assert int(redis_client.ttl(index)) > 3000, index
        assert [r["id"] for r in store.list(user_id="u1")[0]] == ["new:memory", "old:memory"]
