"""Self-iteration's part of erasing a user (``Plugin.erase_user``; the engine's part: worker/ops/erasure.py).

Its user data: memories, skill documents (each document's version history with them) and what each skill run
did, the feature override, review guards naming the user, and the judge diagnostics that quote the user's
messages (entries of the user's scopes, or naming the user)."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

from policies.self_iteration.keys import SelfIterationKeys
from worker.plugin import Keys

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
    removed["diagnostics"] += _drop_diagnostics(client, k.diagnostics, user_id, scopes)
    return removed


def _drop_diagnostics(client: Any, key: str, user_id: str, scopes: frozenset[str]) -> int:
    """Judge diagnostics of the user's scopes, or naming the user (they quote the user's messages)."""
    entries = [_s(e) for e in client.lrange(key, 0, -1)]
    keep = [e for e in entries if not _mentions(e, user_id, scopes)]
    if len(keep) == len(entries):
        return 0
    pipe = client.pipeline(transaction=True)
    pipe.delete(key)
    if keep:
        pipe.rpush(key, *keep)
    pipe.execute()
    return len(entries) - len(keep)


def _mentions(entry: str, user_id: str, scopes: frozenset[str]) -> bool:
    try:
        data = json.loads(entry)
    except ValueError:
        return user_id in entry
    return data.get("scopeKey") in scopes or data.get("userId") == user_id or user_id in entry
