"""The key layout's Lua half: the keys a script builds itself from a scope ref it found (POP_ACQUIRE).

A script normally receives whole keys from worker/keys/layout.py. POP_ACQUIRE pops a scope ref inside Redis and
takes that scope's lease in the same call, so it must build the scope's keys from the ref. It does so from
templates made here by the Python builders themselves, called with markers (``$P$`` the key prefix, ``$T$`` the
tenant, ``$S$`` the scope key): the layout is declared once, in Python, and the Lua fills the markers in
(worker/store/lua/lib/scope_keys.lua). ``tests/unit/worker/test_lua_keys.py`` compares both sides on real keys.

Only for one scope bucket (the default): the bucket of a scope is CRC-32 of its key, which the Lua does not
compute; a deployment with ``AGENT_SIGNAL_SCOPE_BUCKETS`` above 1 (or a Redis Cluster) keeps the two steps.
"""

from __future__ import annotations

from functools import cache

from worker.keys.layout import Keys

__all__ = ["MARKERS", "lua_key_templates"]

MARKERS = {"prefix": "$P$", "tenant": "$T$", "scope": "$S$"}


@cache
def lua_key_templates() -> dict[str, str]:
    """Constant name -> template, for the keys ACQUIRE needs (worker/store/calls/lease.py ``Acquire``)."""
    scope = MARKERS["scope"]
    k = Keys(MARKERS["prefix"], MARKERS["tenant"], 1).for_scope(scope)
    return {
        "KEY_LEASE": k.lease(scope),
        "KEY_FENCE": k.fence(scope),
        "KEY_INBOX": k.inbox(scope),
        "KEY_SCHED": k.scheduled(scope),
        "KEY_SCOPES": k.scopes,
        "KEY_PAUSED": k.runs("paused"),
        "KEY_STATS": k.stats,
        "KEY_RUNS_ACTIVE": k.runs("status", "active"),
        "KEY_RUNS_CANCELLED": k.runs("status", "cancelled"),
        "KEY_EVENT_PREFIX": k.event_prefix,
    }
