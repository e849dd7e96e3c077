"""The session's function runtime in Redis, changed by optimistic compare-and-set.

The state machine is Python (it evaluates conditions), so a change is read → apply → write under ``WATCH``:
if anybody else changed the session in between, ``EXEC`` fails and the change is re-applied to the fresh
state. Concurrent signals on one session therefore never lose an update, and every change sees all the
changes committed before it (the session's changes are serialized).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TypeVar

from redis import Redis, WatchError

from sessions.fsm import SessionRuntime
from sessions.store import session_scope
from worker.keys import Keys
from worker.retry import backoff_ms

__all__ = ["ContentionError", "FunctionStore"]

T = TypeVar("T")


class ContentionError(RuntimeError):
    """The session stayed too busy to apply a change (after many retries)."""


class FunctionStore:
    def __init__(self, client: Redis, keys: Keys, *, max_retries: int = 200) -> None:
        self.client = client
        self.keys = keys
        self.max_retries = max_retries

    def _key(self, session_id: str) -> str:
        return self.keys.functions_state(session_scope(session_id))

    def load(self, session_id: str) -> SessionRuntime:
        raw = self.client.get(self._key(session_id))
        return SessionRuntime() if raw is None else SessionRuntime.from_json_dict(json.loads(raw))

    def update(self, session_id: str, change: Callable[[SessionRuntime], T]) -> tuple[T, SessionRuntime]:
        """Apply ``change`` atomically; it may be called more than once (it must only touch the runtime)."""
        key = self._key(session_id)
        for attempt in range(self.max_retries):
            with self.client.pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(key)  # type: ignore[no-untyped-call]
                    raw = pipe.get(key)
                    runtime = (
                        SessionRuntime() if raw is None else SessionRuntime.from_json_dict(json.loads(raw))
                    )
                    result = change(runtime)
                    pipe.multi()
                    pipe.set(
                        key, json.dumps(runtime.to_json_dict(), ensure_ascii=False, separators=(",", ":"))
                    )
                    pipe.execute()
                    return result, runtime
                except WatchError:
                    time.sleep(backoff_ms(attempt + 1, base_ms=1, cap_ms=50) / 1000)  # the one backoff
        raise ContentionError(f"session {session_id!r} changed under us {self.max_retries} times; try again")
