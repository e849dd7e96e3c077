"""The session's function runtime in Redis, changed by optimistic compare-and-set.

The state machine is Python (it evaluates conditions), so a change is read → apply → write under ``WATCH``:
if anybody else changed the session in between, ``EXEC`` fails and the change is re-applied to the fresh
state. Concurrent signals on one session therefore never lose an update, and every change sees all the
changes committed before it (the session's changes are serialized).

Bounds (sessions/store.py ``SessionLimits``): a change that grows the document past ``max_session_bytes`` and
an artifact over ``max_message_bytes`` (written, or captured from a signal's or a tool call's payload) raise
``SessionFull`` and store nothing; every write refreshes the TTL of all of the session's keys in the same
transaction. The document counts toward the stored bytes of the session's user (``AGENT_SIGNAL_USER_MAX_BYTES``)
and of its tenant (``AGENT_SIGNAL_TENANT_MAX_BYTES``, a session of no user: that alone; worker/store/quotas.py)
until the session's TTL, as its context does: its growth past the largest size already counted
(``stateCounted`` in the session's hash), so a document that shrinks and grows again (an artifact rewritten, an
attention item that comes and goes) is not counted twice. That mark holds for as long as its first count does
(``stateCountedDay``, the day that count stops): a session kept alive past it has its whole document counted
again by its next write, as new (its later growth, counted into later days, then counts twice until those days
end: the error is on the quota's side; a mark kept before its day was is taken as lapsed). A change that grows
the document past what is counted while the user, or the tenant, is at its quota raises ``UserQuotaExceeded``
and stores nothing; a recount alone never does (the document is stored either way).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TypeVar

from redis import Redis, WatchError

from sessions.fsm import SessionRuntime
from sessions.store import (
    ContentionError,
    SessionFull,
    SessionGone,
    SessionLimits,
    SettingsChange,
    UserQuotaExceeded,
    session_keys,
    session_scope,
)
from worker.core.clock import now_ms
from worker.core.retry import backoff_ms
from worker.keys.layout import Keys
from worker.store.quotas import DAY_MS, add_user_bytes, bytes_over, user_bytes_day

__all__ = ["ContentionError", "FunctionStore"]

T = TypeVar("T")
# the session hash's fields: the largest function-state size counted for its user, and the day (since the epoch)
# whose end drops the first of those counts (after it, the document is counted again as new)
STATE_COUNTED = "stateCounted"
STATE_COUNTED_DAY = "stateCountedDay"


class FunctionStore:
    def __init__(
        self, client: Redis, keys: Keys, *, max_retries: int = 200, limits: SessionLimits | None = None
    ) -> None:
        self.client = client
        self.keys = keys
        self.max_retries = max_retries
        self.limits = limits or SessionLimits()

    def _key(self, session_id: str) -> str:
        return self.keys.functions_state(session_scope(session_id))

    def load(self, session_id: str) -> SessionRuntime:
        raw = self.client.get(self._key(session_id))
        return SessionRuntime() if raw is None else SessionRuntime.from_json_dict(json.loads(raw))

    def _check_size(self, document: str, before: str | bytes | None) -> None:
        """Refuse growth past the cap (a change that does not grow an oversized document still passes)."""
        limit, size = self.limits.max_session_bytes, len(document.encode("utf-8"))
        if size > limit and size > len(before or b""):
            message = (
                f"the session's function state may be at most {limit} bytes; this change makes it {size}"
            )
            raise SessionFull(None, limit, message)

    def _check_artifacts(self, artifacts: dict[str, str], before: dict[str, str]) -> None:
        """Refuse an artifact a change wrote (a signal's or a tool call's captured payload) past
        ``max_message_bytes``, the cap ``put_artifact`` holds a written one to (field None: the route names
        its own)."""
        limit = self.limits.max_message_bytes
        for name, content in artifacts.items():
            if before.get(name) != content and (size := len(content.encode("utf-8"))) > limit:
                message = (
                    f"artifact {name!r}: an artifact may be at most {limit} bytes; this capture is {size}"
                )
                raise SessionFull(None, limit, message)

    def _check_quota(self, reader: Redis, user_id: str | None) -> None:
        """UserQuotaExceeded when ``user_id`` (None: no user) already stores ``max_user_bytes`` or more, or the
        tenant ``max_tenant_bytes`` (0: no quota)."""
        checks = [(self.keys.user_bytes(user_id), self.limits.max_user_bytes)] if user_id else []
        checks = [*checks, (self.keys.tenant_bytes, self.limits.max_tenant_bytes)]
        checks = [(key, limit) for key, limit in checks if limit > 0]
        over = (
            bytes_over([reader.hgetall(key) for key, _ in checks], [q for _, q in checks]) if checks else None
        )
        if over is not None:
            limit = checks[over.position - 1][1]
            tenant = checks[over.position - 1][0] == self.keys.tenant_bytes
            raise UserQuotaExceeded(over.used, limit, over.retry_s, tenant=tenant, user_id=user_id)

    def update(
        self,
        session_id: str,
        change: Callable[[SessionRuntime], T],
        *,
        settings: SettingsChange | None = None,
    ) -> tuple[T, SessionRuntime]:
        """Apply ``change`` atomically; it may be called more than once (it must only touch the runtime).

        SessionFull (field None: the route names its own) when the document would grow past
        ``max_session_bytes``; nothing is stored then. ``settings``: a settings write committed in the same
        transaction (a PUT's settings and the state of its ``functions``): both are written, or neither (its
        TooManySessions, like a refusal here, writes nothing)."""
        key, session_hash = self._key(session_id), self.keys.session(session_scope(session_id))
        seen_owner = False
        for attempt in range(self.max_retries):
            with self.client.pipeline(transaction=True) as pipe:
                try:
                    # the settings too: an erasure deleting them (and the user they name) fails the write, which
                    # would else store the state with no owner, where no later erasure of the user finds it
                    pipe.watch(key, session_hash)  # type: ignore[no-untyped-call]
                    if settings is not None:
                        settings.watch(pipe)
                    raw = pipe.get(key)
                    user, counted, counted_day = pipe.hmget(
                        session_hash, ["userId", STATE_COUNTED, STATE_COUNTED_DAY]
                    )
                    runtime = (
                        SessionRuntime() if raw is None else SessionRuntime.from_json_dict(json.loads(raw))
                    )
                    artifacts_before = dict(runtime.artifacts)
                    result = change(runtime)
                    self._check_artifacts(runtime.artifacts, artifacts_before)
                    document = json.dumps(runtime.to_json_dict(), ensure_ascii=False, separators=(",", ":"))
                    before = raw.encode("utf-8") if isinstance(raw, str) else raw
                    self._check_size(document, before)
                    size = len(document.encode("utf-8"))
                    today = now_ms() // DAY_MS
                    # a mark without its day was made before the day was kept: when its count ends is unknown
                    lapsed = counted is not None and (counted_day is None or int(counted_day) < today)
                    # counted so far: nothing once the first count lapsed, else the high-water mark, or (a
                    # session older than it) what is stored now
                    growth = size - (0 if lapsed else max(int(counted or 0), len(before or b"")))
                    owner = user.decode("utf-8") if isinstance(user, bytes) else user
                    if seen_owner and not owner and settings is None:  # it named a user: erased meanwhile
                        raise SessionGone(session_id)
                    seen_owner = seen_owner or bool(owner)
                    if growth > 0 and size > len(before or b""):
                        # a recount alone is stored either way: never refused. Read on the connection this
                        # WATCH holds (the counts share the session's home slot): read on another, 20 signals at
                        # once on a pool of 20 each held one and waited for a second, and all failed PoolExhausted
                        self._check_quota(pipe, owner)
                    pipe.multi()
                    pipe.set(key, document)
                    if settings is not None:
                        settings.stage(pipe)
                    if growth > 0:  # counted for the tenant, and for the session's user when it names one
                        add_user_bytes(pipe, self.keys, owner, growth, ttl_s=self.limits.session_ttl_s)
                        pipe.hset(session_hash, STATE_COUNTED, size)
                        if lapsed or counted is None:  # a new first count: the day it stops
                            pipe.hset(
                                session_hash, STATE_COUNTED_DAY, user_bytes_day(self.limits.session_ttl_s)
                            )
                    for session_key in session_keys(self.keys, session_id, user):
                        pipe.expire(session_key, self.limits.session_ttl_s)
                    pipe.execute()
                    return result, runtime
                except WatchError:
                    pipe.reset()  # the backoff holds no connection
                    time.sleep(backoff_ms(attempt + 1, base_ms=1, cap_ms=50) / 1000)  # the one backoff
        raise ContentionError(f"session {session_id!r} changed under us {self.max_retries} times; try again")

    def put_artifact(self, session_id: str, name: str, content: str) -> SessionRuntime:
        """Store one artifact; SessionFull naming ``content`` over ``max_message_bytes`` (or the state's cap)."""
        limit, size = self.limits.max_message_bytes, len(content.encode("utf-8"))
        if size > limit:
            raise SessionFull(
                "content", limit, f"content: an artifact may be at most {limit} bytes; this one is {size}"
            )
        return self.update(session_id, lambda rt: rt.artifacts.__setitem__(name, content))[1]
