"""The server-side Lua scripts: every multi-key state change of the engine is one atomic round trip.

Each script is a file, ``worker/store/lua/<name>.lua`` (its contract in the comments it opens with; the library
pieces it requires in ``lua/lib/``), joined by :mod:`worker.store.loader`; its keys and arguments are the fields
of its call (worker/store/calls.py) and its replies are worker/store/replies.py's codes. :class:`Scripts`
registers each script once per Redis client, on first use (``register_script`` uses EVALSHA and falls back to
EVAL after a server restart).
"""

from __future__ import annotations

import threading
from typing import Any

from redis import Redis
from redis.commands.core import Script

from worker.keys.lua_half import lua_key_templates
from worker.store.calls import ScriptCall
from worker.store.loader import load_script
from worker.store.quotas import DAY_MS, KEEP, RETAINED_SLOTS

__all__ = ["CONSTANTS", "Scripts"]

# The named constants the Lua reads, from the Python that owns them (one value, both sides).
CONSTANTS: dict[str, int | str] = {
    "DAY_MS": DAY_MS,
    "KEEP_FIELD": KEEP,
    "RETAINED_SLOTS": RETAINED_SLOTS,
    **lua_key_templates(),  # the key layout's Lua half (POP_ACQUIRE)
}


class Scripts:
    """The scripts on one client: :meth:`run` calls one with its call's keys and arguments."""

    def __init__(self, client: Redis) -> None:
        self.client = client
        self._registered: dict[str, Script] = {}
        self._lock = threading.Lock()

    @classmethod
    def register(cls, client: Redis) -> Scripts:
        return cls(client)

    def script(self, name: str) -> Script:
        """The registered script ``name`` (``lua/<name>.lua``)."""
        found = self._registered.get(name)
        if found is None:
            with self._lock:
                found = self._registered.get(name)
                if found is None:
                    found = self.client.register_script(load_script(name, constants=CONSTANTS))
                    self._registered[name] = found
        return found

    def run(self, call: ScriptCall, *, client: Any = None) -> Any:
        """Run ``call``'s script (on ``client``, a pipeline, when given)."""
        return self.script(call.SCRIPT)(keys=call.keys(), args=call.args(), client=client)
