"""The key layout's Lua half: the keys a script builds itself from a scope ref it found (POP_ACQUIRE).

A script normally receives whole keys from worker/keys/layout.py. POP_ACQUIRE pops a scope ref inside Redis and
takes that scope's lease in the same call, so it must build the scope's keys from the ref. It does so with a
Lua function made here from the Python builders themselves: they are called with markers (``$P$`` the key
prefix, ``$T$`` the tenant, ``$S$`` the scope key), and each template they return becomes one concatenation of
its literal parts and the function's three arguments. The layout is declared once, in Python, and the Lua
parses nothing per call (the loader writes the function into the scripts that name it: worker/store/scripts.py;
ten ``string.gsub`` fills of the templates cost a lone event's commit ~47 k Redis instructions).
``tests/unit/worker/keys/test_lua_keys.py`` compares both sides on real keys.

Only for one scope bucket (the default): the bucket of a scope is CRC-32 of its key, which the Lua does not
compute; a deployment with ``AGENT_SIGNAL_SCOPE_BUCKETS`` above 1 (or a Redis Cluster) keeps the two steps.
"""

from __future__ import annotations

import re
from functools import cache

from worker.keys.layout import Keys

__all__ = ["MARKERS", "lua_key_templates", "lua_scope_keys"]

MARKERS = {"prefix": "$P$", "tenant": "$T$", "scope": "$S$"}
_ARGUMENTS = {marker: name for name, marker in MARKERS.items()}  # the Lua function's parameter names
_MARKER = re.compile("(" + "|".join(re.escape(m) for m in MARKERS.values()) + ")")


@cache
def lua_key_templates() -> dict[str, str]:
    """Field of the keys table (lib/acquire.lua's ``k``) -> template, for the keys ACQUIRE needs
    (worker/store/calls/lease.py ``Acquire``)."""
    scope = MARKERS["scope"]
    k = Keys(MARKERS["prefix"], MARKERS["tenant"], 1).for_scope(scope)
    return {
        "lease": k.lease(scope),
        "fence": k.fence(scope),
        "inbox": k.inbox(scope),
        "sched": k.scheduled(scope),
        "scopes": k.scopes,
        "paused": k.runs("paused"),
        "stats": k.stats,
        "runs_active": k.runs("status", "active"),
        "runs_cancelled": k.runs("status", "cancelled"),
        "lane_holders": k.lane_holders,
        "ev_prefix": k.event_prefix,
    }


def _lua_string(text: str) -> str:
    """A Lua string literal of ``text``: printable ASCII as it is (``\\`` and ``'`` escaped), every other byte of
    its UTF-8 as a decimal escape (``\\13``), which Lua 5.1 reads back byte for byte."""
    out = []
    for byte in text.encode("utf-8"):
        char = chr(byte)
        out.append("\\" + char if char in "\\'" else char if 32 <= byte < 127 else f"\\{byte:03d}")
    return "'" + "".join(out) + "'"


def _concatenation(template: str) -> str:
    """``'$P$t:{$T$}:stats'`` -> ``prefix .. 't:{' .. tenant .. '}:stats'``."""
    parts = [_ARGUMENTS.get(part) or _lua_string(part) for part in _MARKER.split(template) if part]
    return " .. ".join(parts)


@cache
def lua_scope_keys() -> str:
    """The Lua source of a function expression ``(prefix, tenant, scope) -> {lease = ..., ...}``: the table of
    :func:`lua_key_templates`, each key concatenated from its template's parts."""
    fields = ",\n  ".join(f"{field} = {_concatenation(t)}" for field, t in lua_key_templates().items())
    return f"function({', '.join(MARKERS)})\n  return {{{fields}}}\nend"
