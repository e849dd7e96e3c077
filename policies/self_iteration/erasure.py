"""Self-iteration's part of erasing a user (``Plugin.erase_user``; the engine's part: worker/ops/erasure.py).

Its user data: memories, skill documents (each document's version history with them) and what each skill run
did, the feature override, review guards naming the user, the judge diagnostics that quote the user's messages,
and, in each of the user's scopes, the records that carry the user's feedback: parked skill candidates
(``skill-intent:{scope}``, with ``pendingSynthesis.message``), procedure records (``procedure:{scope}``), the
skill-candidate bucket (``skill-candidates:{scope}``) and the user's procedure markers
(``procedure-marker:{scope}:u=<userId>:…``). A scope that only this user's events ran in is gone
already (the engine dropped it whole); in one other users share, a record or a diagnostic goes when its
``userId`` is this user, matched exactly. One written before records named their user goes only when its scope
was this user's alone (the engine dropped it: no ``scope-users`` set is left for it), and a diagnostic
without a user only then too."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

from policies.self_iteration.keys import SelfIterationKeys
from policies.self_iteration.records.procedures import procedure_days
from worker.plugin import Keys, now_ms

__all__ = ["erase_user"]

SCAN_COUNT = 500


def _s(value: Any) -> str:
    return value if isinstance(value, str) else value.decode("utf-8")


def _glob_escape(text: str) -> str:
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


def erase_user(client: Any, keys: Keys, user_id: str, scopes: frozenset[str]) -> Mapping[str, int]:
    """Delete what self-iteration stores of ``user_id`` in ``keys``' tenant; the counts removed, by kind."""
    k, removed = SelfIterationKeys(keys), Counter[str]()
    removed["memories"] += int(client.hlen(k.memories(user_id)))
    client.delete(k.memories(user_id))
    for key in client.scan_iter(match=_glob_escape(k.skills(user_id, "")) + "*", count=SCAN_COUNT):
        doc_ids = [_s(d) for d in client.hkeys(key)]
        removed["skills"] += len(doc_ids)
        if doc_ids:
            removed["skillVersions"] += int(client.delete(*[k.skill_history(d) for d in doc_ids]))
        client.delete(key)
    for key in client.scan_iter(match=_glob_escape(k.skill_runs(user_id, "")) + "*", count=SCAN_COUNT):
        client.delete(key)  # what each skill run did (its answer to a redelivery)
    removed["featureOverrides"] += int(client.hdel(k.overrides, user_id))
    # Review guards are "<kind>-guard:<kind>:<userId>:…" (policies/self_iteration/handlers/reviews.py): the user is the
    # third segment, matched exactly (user ids hold no ':').
    guard = re.compile(
        re.escape(k.review_guard("")) + r"[a-z-]+-guard:[a-z-]+:" + re.escape(user_id) + "(:|$)"
    )
    for key in client.scan_iter(match=_glob_escape(k.review_guard("")) + "*", count=SCAN_COUNT):
        if guard.match(_s(key)):
            removed["reviewGuards"] += int(client.delete(key))
    alone = _alone(client, keys, scopes)
    removed["scopeRecords"] += _drop_scope_records(client, k, user_id, scopes)
    removed["procedureMarkers"] += _drop_markers(client, keys, k, user_id, scopes)
    removed["diagnostics"] += _drop_diagnostics(client, k.diagnostics, user_id, alone)
    return removed


def _alone(client: Any, keys: Keys, scopes: frozenset[str]) -> frozenset[str]:
    """The scopes that were this user's alone: the engine dropped them whole, their users' set with them (a
    scope other users share keeps that set, without this user)."""
    ordered = sorted(scopes)
    pipe = client.pipeline(transaction=False)
    for scope in ordered:
        pipe.exists(keys.scope_users(scope))
    return frozenset(scope for scope, kept in zip(ordered, pipe.execute(), strict=True) if not kept)


def _user_of(raw: Any) -> str | None:
    """The ``userId`` a stored JSON record names (None: none, or not a JSON object)."""
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    user = data.get("userId") if isinstance(data, dict) else None
    return user if isinstance(user, str) else None


def _drop_scope_records(client: Any, k: SelfIterationKeys, user_id: str, scopes: frozenset[str]) -> int:
    """The user's parked skill candidates, procedure records and skill-candidate items in ``scopes``."""
    removed = 0
    for scope in sorted(scopes):
        days = procedure_days(now_ms() // 1000)
        procedures = [k.procedure_undated(scope), *(k.procedure(scope, day) for day in days)]
        for key in (k.skill_intents(scope), *procedures):
            fields = [f for f, raw in client.hgetall(key).items() if _user_of(raw) == user_id]
            if fields:
                removed += int(client.hdel(key, *fields))
        bucket = k.skill_candidates(scope)
        for item in {raw for raw in client.lrange(bucket, 0, -1) if _user_of(raw) == user_id}:
            removed += int(client.lrem(bucket, 0, item))
    return removed


def _drop_markers(client: Any, keys: Keys, k: SelfIterationKeys, user_id: str, scopes: frozenset[str]) -> int:
    """The user's procedure markers in ``scopes`` (their keys name the user; a marker names a message or tool
    call id): one walk per bucket of the scopes, each key checked against a scope's exact prefix (a scope key
    may hold what the pattern's ``*`` spans)."""
    starts = {k.procedure_markers_of(scope, user_id) for scope in scopes}
    if not starts:
        return 0
    removed = 0
    for prefix in sorted({keys.scope_prefix(scope) for scope in scopes}):
        pattern = _glob_escape(prefix) + "procedure-marker:{*}:" + _glob_escape(f"u={user_id}") + ":*"
        doomed = [
            key for key in map(_s, client.scan_iter(match=pattern, count=SCAN_COUNT)) if _starts(key, starts)
        ]
        if doomed:
            removed += int(client.delete(*doomed))
    return removed


def _starts(key: str, starts: set[str]) -> bool:
    return any(key.startswith(start) for start in starts)


def _drop_diagnostics(client: Any, key: str, user_id: str, alone: frozenset[str]) -> int:
    """Judge diagnostics naming the user (they quote the user's messages), or of a scope that was the user's
    alone when they name nobody (written before diagnostics named their user)."""
    entries = [_s(e) for e in client.lrange(key, 0, -1)]
    keep = [e for e in entries if not _mentions(e, user_id, alone)]
    if len(keep) == len(entries):
        return 0
    pipe = client.pipeline(transaction=True)
    pipe.delete(key)
    if keep:
        pipe.rpush(key, *keep)
    pipe.execute()
    return len(entries) - len(keep)


def _mentions(entry: str, user_id: str, alone: frozenset[str]) -> bool:
    """Exact matches only: the entry's ``userId``, or, for an entry that names no user, its ``scopeKey``
    (never a substring of the entry: erasing user ``e`` must not touch every entry with an ``e`` in it)."""
    try:
        data = json.loads(entry)
    except ValueError:
        return False
    if not isinstance(data, dict):
        return False
    if data.get("userId") is not None:
        return bool(data.get("userId") == user_id)
    return data.get("scopeKey") in alone
