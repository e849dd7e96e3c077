"""What one direct receipt append writes (worker/store/receipts.py ``ReceiptStore.append``), on a real Redis: a
second receipt with an id the user already has writes nothing at all, and an append trims its indexes of the
members older than the retention."""

from __future__ import annotations

from typing import Any

import pytest
from redis import Redis

from worker.keys.layout import BucketKeys
from worker.store.receipts import ReceiptStore


def _receipt(rid: str, at: int, *, topic: str = "A", **extra: Any) -> dict[str, Any]:
    return {"id": rid, "kind": "review", "createdAt": at, "userId": "carol", "agentId": "a", "topicId": topic,
            **extra}  # fmt: skip


class TestDuplicateId:
    def test_a_second_receipt_with_the_same_id_writes_nothing(
        self, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """The second append of ``op_1:summary`` for carol (another run, topic, body) is refused: carol's
        bytes, the topic-B index, the second run's receipts and the channel see nothing of it."""
        store = ReceiptStore(redis_client, keys, ttl_s=3600)
        channel = redis_client.pubsub(ignore_subscribe_messages=True)
        channel.subscribe(keys.receipts_feed("carol"))
        assert channel.get_message(timeout=5) is None  # the subscribe confirmation, skipped
        assert store.append(_receipt("op_1:summary", 1000, detail="x" * 500), event_id="evt_A")
        counted = redis_client.hgetall(keys.user_bytes("carol"))

        second = _receipt("op_1:summary", 2000, topic="B", detail="y" * 500)
        assert not store.append(second, event_id="evt_B")

        assert redis_client.hgetall(keys.user_bytes("carol")) == counted
        assert redis_client.exists(keys.receipt_index("carol", "a", "B")) == 0
        assert redis_client.exists(keys.operation_receipts("carol", "evt_B")) == 0
        assert store.produced_by("carol", ["evt_B"]) == []
        assert [r["id"] for r in store.produced_by("carol", ["evt_A"])] == ["op_1:summary"]
        assert (store.get("carol", "op_1:summary") or {})["topicId"] == "A"
        announced = [channel.get_message(timeout=0.5) for _ in range(2)]
        channel.close()
        assert [m["data"] for m in announced if m] == ["op_1:summary"]


class TestIndexTrim:
    def test_an_append_drops_index_members_older_than_the_retention(
        self, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """With a 60 s retention, an append at 90 s drops the member created at 0 s from the user's index and
        the agent/topic one, keeps the one created at 30 s (exactly the retention before it) and adds its own."""
        store = ReceiptStore(redis_client, keys, ttl_s=60)
        for rid, at in (("r0", 0), ("r30", 30_000), ("r90", 90_000)):
            assert store.append(_receipt(rid, at))
        for index in (keys.user_receipts("carol"), keys.receipt_index("carol", "a", "A")):
            assert redis_client.zrange(index, 0, -1) == ["r30", "r90"], index

    def test_a_receipt_dated_in_the_future_trims_by_this_clock(
        self, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """``receipt_effects`` is plugin API: a receipt whose createdAt is a year ahead trimmed every older member
        of the user's indexes. The cutoff never passes the worker's clock."""
        import time

        store = ReceiptStore(redis_client, keys, ttl_s=3600)
        now = int(time.time() * 1000)
        assert store.append(_receipt("recent", now - 60_000))
        assert store.append(_receipt("ahead", now + 365 * 24 * 3600 * 1000))
        assert sorted(redis_client.zrange(keys.user_receipts("carol"), 0, -1)) == ["ahead", "recent"]


class TestOwner:
    def test_a_plugins_receipt_must_say_whose_it_is(self, keys: BucketKeys) -> None:
        """A receipt staged without a ``userId`` key was filed under no user (``-``): its user's listing never
        showed it and their erasure left it. ``receipt_effects`` (plugin API) refuses it, naming the fix; an
        explicit None (an event that names no user) is filed under no user, as before."""
        from worker.core.errors import PermanentFailure
        from worker.store.receipts import NO_USER, ReceiptWithoutUser, receipt_effects

        mine = {"id": "esc-1", "kind": "escalation", "createdAt": 1000}
        with pytest.raises(
            ReceiptWithoutUser, match=r"receipt 'esc-1' has no userId: set receipt\['userId'\]"
        ) as refused:
            receipt_effects(keys, mine, 60)
        assert isinstance(refused.value, PermanentFailure) and refused.value.code == "INVALID_EFFECT"
        nobodys = receipt_effects(keys, {**mine, "userId": None}, 60)
        assert nobodys[0][:2] == ["SET", keys.receipt(NO_USER, "esc-1")]
        carols = receipt_effects(keys, {**mine, "userId": "carol"}, 60)
        assert carols[0][:2] == ["SET", keys.receipt("carol", "esc-1")]
