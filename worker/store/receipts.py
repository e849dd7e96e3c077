"""Receipts: what the product UI shows next to the chat message that caused them (LobeHub §2.7, §7.2).

A receipt belongs to one user: its ``userId`` is the user of the event whose chain appended it (the user the
credential stamped, never one a payload names), and the user is part of its key. Its id stays LobeHub's
(``<sourceId>:…``): two users' receipts of one source id (``msg_1`` in two conversations) are two receipts,
and neither can read, overwrite or suppress the other's.

A receipt is stored append-once (``SET NX``) with the retention TTL and indexed by ``createdAt`` in the user's
own index (every agent and topic), in LobeHub's per user/agent/topic index, and under the runs that produced
it (the event whose chain appended it, and the agent run, by operation id, that reported it), so a run's
detail lists its receipts. Receipts are written by action handlers as *staged effects*
(:func:`receipt_effects`), so they commit atomically with the action's idempotency mark: a replayed
completion adds none. New receipt ids are announced on the user's channel (the SSE stream).

A direct append (:meth:`ReceiptStore.append`: tests, tools and the legacy migration) writes the indexes, the
announcement and the byte count only when its ``SET NX`` writes (a WATCH on the receipt's key: a second receipt
with the same id for the same user writes nothing at all). Both paths drop from the two zset indexes the members
created more than the retention before the receipt (:func:`receipt_index_trims`, a ZREMRANGEBYSCORE each): their
receipts have expired, and an index that keeps being written to never expires itself. A staged receipt makes
its other writes depend on its ``SET NX`` the same way: staged with ``ctx.effects.call_once`` (staged.lua's
``THEN``), a receipt whose id its user already has adds no index entry, byte count or announcement.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from redis import Redis
from redis.exceptions import WatchError

from worker.core.clock import now_ms
from worker.core.errors import PermanentFailure
from worker.core.ids import NO_USER  # the user of a receipt whose event named none (never a user id)
from worker.keys.layout import Keys, glob_escaped
from worker.store.quotas import receipt_bytes_effects

__all__ = [
    "ERASED",
    "NO_USER",
    "ReceiptStore",
    "ReceiptWithoutUser",
    "matches",
    "migrate_legacy_receipts",
    "receipt_commands",
    "receipt_effects",
    "receipt_index_trims",
    "receipt_owner",
]

# Announced on a user's channel once the user is erased (DELETE /v1/users/{userId}): the user's open receipt streams
# end. No receipt id holds a control character (the id rule), so it cannot be one.
ERASED = "\x00erased"
PAGE = 200  # index entries read per round trip while listing
MAX_EXAMINED = (
    5000  # index entries one list call reads at most (a filtered page may stop there with a cursor)
)


IndexPage = list[tuple[str, int]]  # (receipt id, createdAt) newest first


def _text(value: Any) -> str:
    return value if isinstance(value, str) and value else NO_USER


def receipt_owner(receipt: Mapping[str, Any]) -> tuple[str, str, str]:
    """``(userId, agentId, topicId)`` of a receipt, ``-`` for each it does not name."""
    return _text(receipt.get("userId")), _text(receipt.get("agentId")), _text(receipt.get("topicId"))


def matches(receipt: Mapping[str, Any], user_id: str, agent_id: str | None, topic_id: str | None) -> bool:
    """True when ``receipt`` is ``user_id``'s and in ``agent_id``/``topic_id`` when they are given (LobeHub's
    listReceipts returns only matching receipts, whatever its index names)."""
    user, agent, topic = receipt_owner(receipt)
    return user == user_id and agent_id in (None, agent) and topic_id in (None, topic)


class ReceiptWithoutUser(PermanentFailure):
    """A plugin's receipt that does not say whose it is (no ``userId`` key): its event is dead at once
    (``INVALID_EFFECT``), as for other staged writes refused, since every attempt would fail the same way."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="INVALID_EFFECT")


def receipt_effects(
    keys: Keys,
    receipt: Mapping[str, Any],
    ttl_s: int,
    *,
    event_id: str | None = None,
    body_ttl_s: int | None = None,
) -> list[list[str | int]]:
    """:func:`receipt_commands` for a plugin's handler, which must say whose the receipt is: its ``userId`` key is
    the event's user (``ctx.source.user_id``), or None for an event that names none. A receipt without the key
    was filed under no user: listed for nobody, and kept by the erasure of the user it was about. Raises
    :class:`ReceiptWithoutUser` (the event fails, naming it)."""
    if "userId" not in receipt:
        raise ReceiptWithoutUser(
            f"receipt {receipt.get('id')!r} has no userId: set receipt['userId'] = ctx.source.user_id "
            "(None when the event names no user) so that its user lists it and their erasure removes it"
        )
    return receipt_commands(keys, receipt, ttl_s, event_id=event_id, body_ttl_s=body_ttl_s)


def receipt_commands(
    keys: Keys,
    receipt: Mapping[str, Any],
    ttl_s: int,
    *,
    event_id: str | None = None,
    body_ttl_s: int | None = None,
) -> list[list[str | int]]:
    """The Redis commands that append ``receipt`` once for its user: SET NX with TTL, then the indexes (the
    user's, LobeHub's user/agent/topic one, and the runs': ``event_id``'s and its ``operationId``'s), then the
    announcement on the user's channel. A handler stages them with ``ctx.effects.call_once(*commands)``, so the
    rest run only when the SET NX writes. ``ttl_s`` is the retention: the indexes' TTL and trim; ``body_ttl_s``
    (default ``ttl_s``) the receipt's own, which may be shorter (a migrated one keeps what it had left) but
    never sets an index's: the indexes hold the user's other receipts too."""
    user, agent, topic = receipt_owner(receipt)
    receipt_id, created_at = str(receipt["id"]), int(receipt["createdAt"])
    body = json.dumps(dict(receipt), ensure_ascii=False, separators=(",", ":"))
    body_ttl = ttl_s if body_ttl_s is None else body_ttl_s
    commands: list[list[str | int]] = [["SET", keys.receipt(user, receipt_id), body, "NX", "EX", body_ttl]]
    for index in (keys.user_receipts(user), keys.receipt_index(user, agent, topic)):
        # scored no later than this clock: a receipt dated ahead would stay indexed long after it expired
        commands += [["ZADD", index, "NX", min(created_at, now_ms()), receipt_id], ["EXPIRE", index, ttl_s]]
    runs = [r for r in (event_id, receipt.get("operationId")) if isinstance(r, str) and r]
    for run in runs:
        index = keys.operation_receipts(user, run)
        commands += [["SADD", index, receipt_id], ["EXPIRE", index, ttl_s]]
    commands.append(["PUBLISH", keys.receipts_feed(user), receipt_id])
    commands += receipt_bytes_effects(
        keys, receipt, body, body_ttl
    )  # the user's storage quota (worker/store/quotas.py), counted while the receipt lives
    return commands + receipt_index_trims(keys, receipt, ttl_s)


def receipt_index_trims(keys: Keys, receipt: Mapping[str, Any], ttl_s: int) -> list[list[str | int]]:
    """The commands that drop from the receipt's two zset indexes (the user's, the user/agent/topic one) the
    members created more than ``ttl_s`` before it: their receipts have expired, and an index that keeps being
    written to never expires itself."""
    user, agent, topic = receipt_owner(receipt)
    # the receipt's time, but never past this clock: a createdAt in the future would trim every older member
    before = f"({min(int(receipt['createdAt']), now_ms()) - ttl_s * 1000}"
    indexes = (keys.user_receipts(user), keys.receipt_index(user, agent, topic))
    return [["ZREMRANGEBYSCORE", index, "-inf", before] for index in indexes]


def _write_once(client: Redis, commands: list[list[str | int]]) -> bool:
    """Run ``commands`` (the first a ``SET <key> … NX``) in one transaction when the first one's key is absent,
    else nothing (WATCH: a write of the key meanwhile starts over). True when it wrote."""
    key = str(commands[0][1])
    with client.pipeline(transaction=True) as pipe:
        while True:
            try:
                pipe.watch(key)  # type: ignore[no-untyped-call]
                if pipe.exists(key):
                    return False
                pipe.multi()
                for command in commands:
                    pipe.execute_command(*command)  # type: ignore[no-untyped-call]
                return bool(pipe.execute()[0])
            except WatchError:
                continue


class ReceiptStore:
    """Reads (and, for tests and tools, direct writes) of one tenant's receipts."""

    def __init__(self, client: Redis, keys: Keys, *, ttl_s: int) -> None:
        self.client = client
        self.keys = keys
        self.ttl_s = ttl_s

    def append(self, receipt: Mapping[str, Any], *, event_id: str | None = None) -> bool:
        """Append once, trimming the indexes of expired members; False, and nothing written, when the user
        already has a receipt with this id."""
        commands = receipt_commands(self.keys, receipt, self.ttl_s, event_id=event_id)
        return _write_once(self.client, commands)

    def get(self, user_id: str, receipt_id: str) -> dict[str, Any] | None:
        """``user_id``'s receipt ``receipt_id``, or None."""
        raw = self.client.get(self.keys.receipt(user_id, receipt_id))
        return None if raw is None else dict(json.loads(raw))

    def get_many(self, user_id: str, receipt_ids: Iterable[str]) -> list[dict[str, Any]]:
        """The user's receipts of these ids that still exist, in the order given."""
        ids = list(receipt_ids)
        bodies = self.client.mget([self.keys.receipt(user_id, i) for i in ids]) if ids else []
        found = [dict(json.loads(b)) for b in bodies if b is not None]
        return [r for r in found if receipt_owner(r)[0] == user_id]

    def owners_of(self, receipt_id: str) -> list[str]:
        """The users who have a receipt with this id (a SCAN over the tenant's receipts: for a caller that
        names no user, which a user token never is; give the user where it is known)."""
        prefix = self.keys.receipt_prefix
        escaped = glob_escaped(prefix)
        users: list[str] = []
        for raw in self.client.scan_iter(match=f"{escaped}*", count=1000):
            key = raw if isinstance(raw, str) else raw.decode("utf-8")
            user, sep, rest = key[len(prefix) :].partition(":")
            if sep and rest == receipt_id:  # user ids hold no ':', so the first one ends the user
                users.append(user)
        return sorted(users)

    def update_metadata(
        self, user_id: str, receipt_id: str, changes: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """Merge ``changes`` into the receipt's metadata (keeping its TTL); None when it is gone."""
        key = self.keys.receipt(user_id, receipt_id)
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

    def produced_by(self, user_id: str, runs: Iterable[str]) -> list[dict[str, Any]]:
        """The user's receipts that these runs produced (event ids and agent-run operation ids), newest
        first."""
        wanted = list(dict.fromkeys(runs))
        if not wanted:
            return []
        pipe = self.client.pipeline(transaction=False)
        for run in wanted:
            pipe.smembers(self.keys.operation_receipts(user_id, run))
        ids = sorted({_str(m) for members in pipe.execute() for m in members})
        found = self.get_many(user_id, ids)
        return sorted(found, key=lambda r: (int(r.get("createdAt") or 0), str(r["id"])), reverse=True)

    def list(
        self,
        *,
        user_id: str,
        agent_id: str | None = None,
        topic_id: str | None = None,
        since_created_at: int | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """The user's receipts, newest first, across agents and topics unless ``agent_id``/``topic_id``
        narrow them. ``cursor`` is ``"<createdAt>:<id>"`` of the last receipt of the previous page. A call
        reads at most :data:`MAX_EXAMINED` index entries; a page cut there still carries a cursor."""
        exact = agent_id is not None and topic_id is not None
        index = (
            self.keys.receipt_index(user_id, agent_id or NO_USER, topic_id or NO_USER)
            if exact
            else self.keys.user_receipts(user_id)
        )
        high, after_id = "+inf", None
        if cursor:
            high, _, after_id = cursor.partition(":")
        low = "-inf" if since_created_at is None else str(since_created_at)
        picked: list[tuple[dict[str, Any], str, int]] = []
        last: tuple[str, int] | None = None
        examined = 0
        for batch in self._pages(index, high, low, after_id):
            examined += len(batch)
            bodies = self.client.mget([self.keys.receipt(user_id, m) for m, _ in batch])
            for (member, score), raw in zip(batch, bodies, strict=True):
                last = (member, score)
                receipt = None if raw is None else dict(json.loads(raw))
                if receipt is not None and matches(receipt, user_id, agent_id, topic_id):
                    picked.append((receipt, member, score))
                if len(picked) == limit + 1:
                    page = picked[:limit]
                    return [r for r, _, _ in page], f"{page[-1][2]}:{page[-1][1]}"
            if examined >= MAX_EXAMINED and last is not None:
                return [r for r, _, _ in picked], f"{last[1]}:{last[0]}"
        return [r for r, _, _ in picked], None

    def _pages(self, index: str, high: str, low: str, after_id: str | None) -> Iterator[IndexPage]:
        """The index newest first from ``high`` down to ``low``, in pages; with ``after_id`` (a cursor), the
        entries of score ``high`` up to and including it are skipped (they were on the previous page). Within one
        score the index runs in reverse byte order, so those are the members not below ``after_id``: found even
        when the receipt ``after_id`` has since left the index (expired, erased)."""
        after = None if after_id is None else after_id.encode("utf-8")
        start = 0
        while True:
            rows: list[Any] = list(
                self.client.zrevrangebyscore(index, high, low, start=start, num=PAGE, withscores=True)
            )
            start += len(rows)
            batch: list[tuple[str, int]] = []
            for member_raw, score_raw in rows:
                member, score = _str(member_raw), int(float(score_raw))
                if after is not None and str(score) == high and member.encode("utf-8") >= after:
                    continue
                batch.append((member, score))
            if batch:
                yield batch
            if len(rows) < PAGE:
                return


def _str(value: Any) -> str:
    return value if isinstance(value, str) else bytes(value).decode("utf-8")


def migrate_legacy_receipts(client: Redis, keys: Keys, *, ttl_s: int, dry_run: bool = False) -> int:
    """Move one tenant's receipts stored before receipts were keyed by user (``receipt:<id>``) to their user's
    key and indexes (``receipt:<userId>:<id>``, the user's index and the operation's), keeping each one's TTL
    (``ttl_s`` where it has none). The indexes get the retention ``ttl_s`` (or the receipt's, if longer), as
    every append gives them, never what an old receipt has left: they index the user's newer receipts too.
    Returns how many were (or, with ``dry_run``, would be) moved. Idempotent:
    a receipt already in the new form is left alone. Run once after the upgrade (docs/operations.md)."""
    prefix = keys.receipt_prefix
    pattern = glob_escaped(prefix) + "*"
    moved = 0
    for raw in client.scan_iter(match=pattern, count=1000):
        key = _str(raw)
        body = client.get(key)
        if body is None:
            continue
        try:
            receipt = json.loads(body)
        except ValueError:
            continue
        if not isinstance(receipt, dict) or key[len(prefix) :] != str(receipt.get("id", "")):
            continue  # already keyed by its user (receipt:<userId>:<id>), or not a receipt
        moved += 1
        if dry_run:
            continue
        left_s = int(client.ttl(key))
        body_ttl_s = left_s if left_s > 0 else ttl_s
        effects = receipt_commands(keys, receipt, max(ttl_s, body_ttl_s), body_ttl_s=body_ttl_s)
        commands = [c for c in effects if c[0] != "PUBLISH"]  # an old receipt is not news to any stream
        if not _write_once(client, [*commands, ["DEL", key]]):
            client.delete(key)  # the user has a receipt with this id already: the legacy copy goes
    return moved
