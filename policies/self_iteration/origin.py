"""A run's origin event, and whether an erasure has made it a tombstone since the run was asked for.

An agent run is asked for by one of the user's events (its chain staged the run request in the outbox):
``RunRequest.origin_event_id``, echoed in the request's marker (``marker.originEventId``), which a runner sends
back in its completion (``selfIteration.marker``). Erasing the user (worker/ops/erasure.py) turns that event
into a tombstone (``erasedAt`` set, its payload and user gone: worker/store/lua/erase_scope.lua), and the run
must not bring the user's data back: the reference agent reads the origin's record before it runs and right
before it writes (and drops the run), and the plugin's admission hook refuses a completion whose origin is a
tombstone. The check keeps no key of its own (nothing that names the user outlives the erasure). A record whose
dedupe window has passed is gone, tombstone or not: the run then proceeds (docs/security.md).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from redis import Redis

from worker.plugin import Keys

__all__ = ["ERASED_AT", "ORIGIN_FIELD", "completion_origin", "origin_erased", "origins_erased"]

ORIGIN_FIELD = "originEventId"  # the request's field, and the marker's
ERASED_AT = "erasedAt"  # the tombstone's field in an event's record (ERASE_SCOPE sets it)


def origin_erased(redis: Redis, keys: Keys, event_id: str | None, scope_key: str | None = None) -> bool:
    """Whether ``event_id``'s record is a tombstone: in the bucket of ``scope_key`` (the origin's scope), or in
    every bucket of ``keys``' tenant when it is unknown (one round trip). False without an id, or once the
    record has expired."""
    if not event_id:
        return False
    return origins_erased(redis, [(keys, event_id, scope_key)])[0]


def origins_erased(redis: Redis, origins: Sequence[tuple[Keys, str, str | None]]) -> list[bool]:
    """:func:`origin_erased` of each ``(keys, event_id, scope_key)``, all in one round trip (a batch's
    completions at the door)."""
    pipe = redis.pipeline(transaction=False)
    counts: list[int] = []
    for keys, event_id, scope_key in origins:
        buckets = [keys.for_scope(scope_key)] if scope_key else keys.every_bucket()
        for bucket in buckets:
            pipe.hexists(bucket.event(event_id), ERASED_AT)
        counts.append(len(buckets))
    found = iter(pipe.execute() if origins else [])
    return [any([next(found) for _ in range(count)]) for count in counts]


def completion_origin(body: str) -> str | None:
    """The origin event a completion's stored body names (``payload.selfIteration.marker.originEventId``)."""
    try:
        payload = json.loads(body).get("payload")
    except (ValueError, AttributeError):
        return None
    marker = _dict(_dict(payload).get("selfIteration")).get("marker")
    origin = _dict(marker).get(ORIGIN_FIELD)
    return origin if isinstance(origin, str) and origin else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
