"""The user's events as the erasure finds them, and the user's indexes it takes them out of at the end
(worker/ops/erasure.py): their index ``events-of:user:U`` in each bucket, their dead ones (the DLQ keeps them past
the index) and those still waiting in an inbox of one of their scopes; at the end, only what was read and erased
leaves the event and session indexes (an event or a session of the user admitted meanwhile keeps its entry)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from worker.keys.layout import BucketKeys, Keys
from worker.store.events import EventStore

__all__ = ["CHUNK", "UserEvent", "forget_indexed", "queued_events", "text", "user_events"]

CHUNK = 500  # events per ERASE_SCOPE call, keys per DEL, ids per pipelined read or ZREM


def text(value: Any) -> str:
    """A Redis reply's string (the store's client may answer bytes)."""
    return value if isinstance(value, str) else value.decode("utf-8")


@dataclass(slots=True)
class UserEvent:
    """One of the user's events: its bucket, scope ('' when its record has expired) and chain id."""

    event_id: str
    bucket: int
    scope: str = ""
    chain_id: str = ""


def user_events(
    store: EventStore, tenant: Keys, user_id: str
) -> tuple[dict[str, UserEvent], list[tuple[str, int]]]:
    """The user's events by id: those of the user's index in each bucket (one whose record has expired is kept
    without a scope: its chain may outlive it) and the user's dead ones (the DLQ keeps them past the index); and
    every index entry read, (event id, bucket), tombstones of an earlier erasure included."""
    every = tenant.every_bucket()
    pipe = store.client.pipeline(transaction=False)
    for k in every:
        pipe.zrange(k.user_events(user_id), 0, -1)
        pipe.zrange(k.dlq, 0, -1)
    found = pipe.execute()
    indexed = [(text(x), b) for b in range(len(every)) for x in found[2 * b]]
    dead = [(text(x), b) for b in range(len(every)) for x in found[2 * b + 1]]
    out: dict[str, UserEvent] = {}
    both = [*indexed, *dead]
    for n, ((event_id, b), fields) in enumerate(zip(both, _records(store, every, both), strict=True)):
        scope, chain, owner, state, source_id = fields
        if state is None:
            if n < len(indexed):
                out.setdefault(event_id, UserEvent(event_id, b))
        elif owner is not None and text(owner) == user_id:  # not someone else's dead event, nor a tombstone
            out[event_id] = UserEvent(event_id, b, text(scope) if scope else "", _chain_id(chain, source_id))
    return out, indexed


def _chain_id(chain: Any, source_id: Any) -> str:
    """An event's chain id as its record gives it (chainId only when not ``chain:<sourceId>``)."""
    return text(chain) if chain else (f"chain:{text(source_id)}" if source_id else "")


def _records(store: EventStore, every: list[BucketKeys], ids: list[tuple[str, int]]) -> list[list[Any]]:
    """Each event's (scopeKey, chainId, userId, state, sourceId), read in pipelined chunks."""
    out: list[list[Any]] = []
    for start in range(0, len(ids), CHUNK):
        pipe = store.client.pipeline(transaction=False)
        for event_id, b in ids[start : start + CHUNK]:
            pipe.hmget(every[b].event(event_id), "scopeKey", "chainId", "userId", "state", "sourceId")
        out += pipe.execute()
    return out


def queued_events(
    store: EventStore, tenant: Keys, user_id: str, scopes: list[str], events: dict[str, UserEvent]
) -> None:
    """Add the user's events waiting in these scopes' inboxes (their records outlive the index while they wait;
    read under the leases, so none of them runs now)."""
    pipe = store.client.pipeline(transaction=False)
    for scope in scopes:
        pipe.lrange(tenant.for_scope(scope).inbox(scope), 0, -1)
    every = tenant.every_bucket()
    for scope, ids in zip(scopes, pipe.execute(), strict=True):
        b = tenant.for_scope(scope).bucket
        fresh = [(i, b) for i in (text(x) for x in ids) if i not in events]
        for (event_id, _), (_, chain, owner, _, source_id) in zip(
            fresh, _records(store, every, fresh), strict=True
        ):
            if owner is not None and text(owner) == user_id:
                events[event_id] = UserEvent(event_id, b, scope, _chain_id(chain, source_id))


def forget_indexed(
    store: EventStore, tenant: Keys, user_id: str, erased: set[tuple[str, int]], sessions: list[str]
) -> None:
    """Take the erased events (with the index's tombstones an erasure that met a busy scope left) and sessions out
    of the user's indexes, and only those: the indexes were deleted whole, so an event or a session of the user
    admitted while the erasure ran (an API key may still send them) lost its entry, and no later erasure could find
    its record or its chain (an audit)."""
    every, pipe = tenant.every_bucket(), store.client.pipeline(transaction=False)
    for b, index in enumerate(every):
        ids = sorted(event_id for event_id, bucket in erased if bucket == b)
        for start in range(0, len(ids), CHUNK):
            pipe.zrem(index.user_events(user_id), *ids[start : start + CHUNK])
    for start in range(0, len(sessions), CHUNK):
        pipe.srem(tenant.user_sessions(user_id), *sessions[start : start + CHUNK])
    pipe.execute()
