"""The server-side Lua scripts: every multi-key state change of the engine is one atomic round trip.

Each script is a file, ``worker/store/lua/<name>.lua`` (its contract in the comments it opens with; the library
pieces it requires in ``lua/lib/``), joined by :mod:`worker.store.loader`; its keys and arguments are the fields
of its call (worker/store/calls/) and its replies are worker/store/replies.py's codes. :class:`Scripts`
registers each script once per Redis client, on first use, and sends it by its SHA (``EVALSHA``); a server that
no longer knows it (a restart, ``SCRIPT FLUSH``) gets it loaded again (``SCRIPT LOAD``) and the call repeated.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, cast

from redis import Redis
from redis.client import Pipeline
from redis.commands.core import Script
from redis.exceptions import NoScriptError, ResponseError

from worker.core.idempotency import LANE_FORM
from worker.keys.lua_half import lua_scope_keys
from worker.store.calls import ScriptCall
from worker.store.loader import Constant, LuaSource, load_script
from worker.store.quotas import BACKLOG_RETRY_S, DAY_MS, KEEP, RETAINED_SLOTS

__all__ = [
    "CONSTANTS",
    "DRAIN_GRANT",
    "DRAIN_MARK",
    "GRANT_MAX_BODY_BYTES",
    "PUSH_CHUNK",
    "Scripts",
    "SentCall",
]

# ENQUEUE_PUSH's drain_next messages (worker/runtime/drain_message.py): where a template holds a message's id
# (letters and underscores: Lua's gsub reads it as itself, JSON writes it as it is), and how many go in one LPUSH
# (Lua's unpack stops near 8,000 values).
DRAIN_MARK = "agent_signal_drain_next_id"
PUSH_CHUNK = 1000
# The lease at enqueue (ENQUEUE_PUSH): the header a drain_next template holds for the grant it may carry (a JSON
# string there, replaced whole by the grant or null), and the most bytes of event bodies a batch may hold for its
# message to carry one (the message carries the scope's head).
DRAIN_GRANT = "agent_signal_drain_grant"
GRANT_MAX_BODY_BYTES = 64 * 1024
# The Overview's series (the bucket's ``series`` hash: "<minute>:done", "<minute>:latency_ms"): the minutes it shows.
# COMMIT trims the minutes before them and keeps the hash alive past them (commit.lua ``series_flush``).
SERIES_MINUTES = 60
# A scope's fence (``fence:{scope}``) expires this long after its last grant (lib/acquire.lua): a soak walk counted
# one fence, sequence and users set per scope ever seen, kept for good. A lease lives seconds and a drain minutes,
# so no holder outlives it; a grant after it starts again at Redis's clock, above every number handed out before.
FENCE_IDLE_S = 7 * 86_400

# The named constants the Lua reads, from the Python that owns them (one value, both sides).
CONSTANTS: dict[str, Constant] = {
    "DAY_MS": DAY_MS,
    "KEEP_FIELD": KEEP,
    "RETAINED_SLOTS": RETAINED_SLOTS,
    "BACKLOG_RETRY_S": BACKLOG_RETRY_S,
    "PUSH_CHUNK": PUSH_CHUNK,
    "DRAIN_MARK": DRAIN_MARK,
    "DRAIN_GRANT": DRAIN_GRANT,
    "GRANT_MAX_BODY_BYTES": GRANT_MAX_BODY_BYTES,
    "SERIES_MINUTES": SERIES_MINUTES,
    "FENCE_IDLE_S": FENCE_IDLE_S,
    "LANE_FORM": str(LANE_FORM),  # the mark of an event first begun (a string: the hash's field, the reply's)
    "scope_keys": LuaSource(lua_scope_keys()),  # the key layout's Lua half (POP_ACQUIRE)
}


class Scripts:
    """The scripts on one client: :meth:`run` calls one with its call's keys and arguments."""

    def __init__(self, client: Redis) -> None:
        self.client = client
        # a client of one Redis, not a cluster's nor a pipeline: run() sends EVALSHA itself, send() may be used
        self.plain = isinstance(client, Redis) and not isinstance(client, Pipeline)
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
        """Run ``call``'s script (on ``client``, a pipeline, when given).

        On a plain client, ``EVALSHA`` goes straight to ``execute_command`` and a server that does not know the
        script (NOSCRIPT: restarted, flushed) gets it loaded and the call sent again, as redis-py's ``Script``
        does. Its ``__call__`` imports two pipeline classes and tests the client against them, and it and the
        ``evalsha`` under it copy the keys and arguments into a new tuple at each layer: ~40 k instructions for
        a lone event's commit, ~3 M for an enqueue batch of 500 events (~8,000 arguments). Pipelines and
        cluster clients keep ``Script``'s own way (it registers the script with a pipeline)."""
        script = self.script(call.SCRIPT)
        if client is not None or not self.plain:
            return script(keys=call.keys(), args=call.args(), client=client)
        keys, args, plain = call.keys(), call.args(), cast(Any, self.client)  # execute_command is untyped
        try:
            return plain.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
        except NoScriptError:
            script.sha = plain.script_load(script.script)
            return plain.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)

    def run_batch(self, calls: Sequence[ScriptCall]) -> list[Any]:
        """Run ``calls`` in one pipeline; their replies in order (a script's error reply raised, the first one).

        A plain client's pipeline loads its scripts before it sends them. A cluster's pipeline cannot (redis-py
        leaves NOSCRIPT to the caller): a call a node did not know (never sent there, or the node restarted) did not
        run, and is run again alone, which loads it on every primary. redis-py itself sends calls again whose
        reply was lost (a node's connection failed mid-read), on a pipeline as on a single call: a call whose
        repeat does harm must be idempotent wherever it is sent (a repeated discard answers ``notDead``)."""
        pipe = self.client.pipeline(transaction=False)
        for call in calls:
            self.run(call, client=pipe)
        if self.plain or not calls:
            return list(pipe.execute())
        replies: list[Any] = pipe.execute(raise_on_error=False)
        for position, (call, reply) in enumerate(zip(calls, replies, strict=True)):
            if isinstance(reply, NoScriptError):
                replies[position] = self.run(call)
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies

    def send(self, call: ScriptCall) -> SentCall:
        """Send ``call``'s script now (a :attr:`plain` client's only): :class:`SentCall` reads its reply later,
        and one connection of the pool is the call's until then (other calls use the others). So the caller runs
        Python while Redis runs the script. Unlike :meth:`run`, nothing is sent again on a connection error
        (redis-py's retry), and ``trace_redis_commands`` shows no span for it (it does not go through
        ``execute_command``)."""
        if not self.plain:
            raise TypeError("Scripts.send needs a client of one Redis (not a pipeline or a cluster)")
        script = self.script(call.SCRIPT)
        keys, args = call.keys(), call.args()
        pool = self.client.connection_pool
        conn: Any = pool.get_connection()  # redis-py's Connection is untyped
        try:
            conn.send_command("EVALSHA", script.sha, len(keys), *keys, *args)
        except BaseException:
            conn.disconnect()
            pool.release(conn)
            raise
        return SentCall(self, call, conn)


class SentCall:
    """A script call sent on ``conn`` and not read yet: :meth:`reply` once, or :meth:`abandon`."""

    def __init__(self, scripts: Scripts, call: ScriptCall, conn: Any) -> None:
        self._scripts, self._call, self._conn = scripts, call, conn

    def reply(self) -> Any:
        """The script's reply. NOSCRIPT gets the script loaded and the call run again (:meth:`Scripts.run`); a
        script's error reply is raised as it is; a connection error, or a read cut short, disconnects the
        connection (what it would read next is not ours). The connection goes back to the pool either way."""
        conn, pool = self._take(), self._scripts.client.connection_pool
        try:
            reply = conn.read_response()
        except NoScriptError:
            pool.release(conn)
            return self._scripts.run(self._call)
        except ResponseError:  # the whole error reply was read: the connection is clean
            pool.release(conn)
            raise
        except BaseException:
            conn.disconnect()
            pool.release(conn)
            raise
        pool.release(conn)
        return reply

    def abandon(self) -> None:
        """Give the connection back unread (disconnected: its reply would be read by the next call on it)."""
        if self._conn is not None:
            conn = self._take()
            conn.disconnect()
            self._scripts.client.connection_pool.release(conn)

    def _take(self) -> Any:
        conn, self._conn = self._conn, None
        if conn is None:
            raise RuntimeError("this call's reply was read (or abandoned) already")
        return conn
