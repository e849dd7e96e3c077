"""Procedure records (tool outcomes, skill observations): one hash per scope and day, each counted toward its
user's stored bytes for as long as it lives.

A record is written to the hash of the day (UTC) it is written on; that hash expires ``PROCEDURE_TTL_S`` after
its day ends and is never kept alive by a later day's writes, so a record lives at most its day plus the TTL and
is counted toward its user's and tenant's bytes (``AGENT_SIGNAL_USER_MAX_BYTES``) until then. One hash kept alive
by every write held every record a busy scope ever had (an audit: 600 tool outcomes, 600 fields, none counted).
"""

from __future__ import annotations

import json
from typing import Any

from policies.self_iteration.keys import SelfIterationKeys
from worker.plugin import HandlerContext, now_ms, user_bytes_effects

__all__ = ["DAY_S", "PROCEDURE_TTL_S", "procedure_days", "procedure_field", "stage_procedure_record"]

PROCEDURE_TTL_S = 7 * 24 * 60 * 60  # LobeHub's procedure retention, after the record's day
DAY_S = 24 * 60 * 60


def procedure_field(record: dict[str, Any], source_type: str) -> str:
    """The hash field of ``record``: its ``id`` (LobeHub's ``procedure-record:<sourceId>``, kept as the record's
    id), then its user and the source type of the event that wrote it. An id names the ``sourceId`` only, and a
    scope may hold two users' events of one ``sourceId`` (or one user's under two source types, a tool outcome
    completed and failed): under the id alone, the second record overwrote the first (a derived-id walk)."""
    user = record.get("userId")
    return "\x1f".join((str(record["id"]), user if isinstance(user, str) else "", source_type))


def stage_procedure_record(ctx: HandlerContext, record: dict[str, Any]) -> None:
    """Stage ``record`` (under :func:`procedure_field`) in today's procedure hash of the handler's scope, that
    hash's expiry (its day's end plus the TTL) and the record's bytes counted for its ``userId`` until then."""
    # the worker's clock, not the event's: a caller's timestamp never keeps a day's hash alive
    now_s = now_ms() // 1000
    day = now_s // DAY_S
    ttl_s = (day + 1) * DAY_S + PROCEDURE_TTL_S - now_s
    key = SelfIterationKeys(ctx.keys).procedure(ctx.scope_key, day)
    body = json.dumps(record, ensure_ascii=False)
    field = procedure_field(record, ctx.source.source_type if ctx.source is not None else "")
    ctx.effects.call("HSET", key, field, body)
    ctx.effects.call("EXPIRE", key, ttl_s)
    user = record.get("userId")
    size = len(body.encode("utf-8")) + len(field.encode("utf-8"))
    for command in user_bytes_effects(ctx.keys, user if isinstance(user, str) else None, size, ttl_s=ttl_s):
        ctx.effects.call(*command)


def procedure_days(now_s: int) -> range:
    """The days whose procedure hashes may still exist at ``now_s`` (erasure reads each): one more on each side,
    since a worker's clock may be a little ahead of or behind the eraser's around midnight."""
    today = now_s // DAY_S
    return range(today - PROCEDURE_TTL_S // DAY_S - 2, today + 2)
