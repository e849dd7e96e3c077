"""Receipts: what the product UI shows next to the chat message that caused them (LobeHub §2.7, §7.2).

A receipt is stored append-once under its deterministic id (``SET NX``) with the retention TTL, and indexed
in LobeHub's per user/agent/topic sorted set by ``createdAt``. Receipts are written by action handlers as
*staged effects* (``receipt_effects``), so they commit atomically with the action's idempotency mark: a
replayed completion adds none.
"""

from __future__ import annotations

import json
from typing import Any

from redis import Redis

from worker.keys import Keys
from worker.quotas import receipt_bytes_effects

__all__ = ["ReceiptStore", "receipt_effects"]


def _owner(receipt: dict[str, Any]) -> tuple[str, str, str]:
    return (
        str(receipt.get("userId") or "-"),
        str(receipt.get("agentId") or "-"),
        str(receipt.get("topicId") or "-"),
    )


def _index_key(keys: Keys, receipt: dict[str, Any]) -> str:
    return keys.receipt_index(*_owner(receipt))


def receipt_effects(keys: Keys, receipt: dict[str, Any], ttl_s: int) -> list[list[str | int]]:
    """The Redis commands that append ``receipt`` once: SET NX with TTL, then index it."""
    body = json.dumps(receipt, ensure_ascii=False, separators=(",", ":"))
    index = _index_key(keys, receipt)
    return [
        ["SET", keys.receipt(str(receipt["id"])), body, "NX", "EX", ttl_s],
        ["ZADD", index, "NX", int(receipt["createdAt"]), str(receipt["id"])],
        ["EXPIRE", index, ttl_s],
        ["PUBLISH", keys.receipts_feed(*_owner(receipt)), str(receipt["id"])],
        *receipt_bytes_effects(keys, receipt, body, ttl_s),  # the user's storage quota (worker/quotas.py)
    ]


class ReceiptStore:
    """Reads (and, for tests and tools, direct writes) of receipts."""

    def __init__(self, client: Redis, keys: Keys, *, ttl_s: int) -> None:
        self.client = client
        self.keys = keys
        self.ttl_s = ttl_s

    def append(self, receipt: dict[str, Any]) -> bool:
        """Append once; False when a receipt with this id already exists."""
        pipe = self.client.pipeline(transaction=True)
        for command in receipt_effects(self.keys, receipt, self.ttl_s):
            pipe.execute_command(*command)  # type: ignore[no-untyped-call]
        created = pipe.execute()[0]
        return bool(created)

    def get(self, receipt_id: str) -> dict[str, Any] | None:
        raw = self.client.get(self.keys.receipt(receipt_id))
        return None if raw is None else dict(json.loads(raw))

    def update_metadata(self, receipt_id: str, changes: dict[str, Any]) -> dict[str, Any] | None:
        """Merge ``changes`` into the receipt's metadata (keeping its TTL); None when it is gone."""
        key = self.keys.receipt(receipt_id)
        with self.client.pipeline(transaction=True) as pipe:
            pipe.watch(key)  # type: ignore[no-untyped-call]
            raw = pipe.get(key)
            if raw is None:
                return None
            receipt = dict(json.loads(raw))
            receipt["metadata"] = {**(receipt.get("metadata") or {}), **changes}
            pipe.multi()
            pipe.set(key, json.dumps(receipt, ensure_ascii=False, separators=(",", ":")), keepttl=True)
            pipe.execute()
        return receipt

    def list(
        self,
        *,
        user_id: str,
        agent_id: str,
        topic_id: str,
        since_created_at: int | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Newest first. ``cursor`` is ``"<createdAt>:<id>"`` of the last receipt of the previous page."""
        index = self.keys.receipt_index(user_id or "-", agent_id or "-", topic_id or "-")
        high: str = "+inf"
        after_id: str | None = None
        if cursor:
            high, _, after_id = cursor.partition(":")
        low = "-inf" if since_created_at is None else str(since_created_at)
        rows: list[Any] = list(
            self.client.zrevrangebyscore(index, high, low, start=0, num=limit + 200, withscores=True)
        )
        picked: list[tuple[str, float]] = []
        skipping = after_id is not None
        for row in rows:
            member = str(row[0] if isinstance(row[0], str) else row[0].decode())
            score = float(row[1])
            if skipping:
                if member == after_id:
                    skipping = False
                continue
            picked.append((member, score))
            if len(picked) == limit + 1:
                break
        page = picked[:limit]
        bodies = self.client.mget([self.keys.receipt(m) for m, _ in page]) if page else []
        receipts = [json.loads(b) for b in bodies if b is not None]
        next_cursor = f"{int(page[-1][1])}:{page[-1][0]}" if len(picked) > limit else None
        return receipts, next_cursor
