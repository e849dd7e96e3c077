"""Idempotency lanes in Redis, fenced by the scope's lease: the scheduler's :class:`ActionPort` for one drain.

``lookup`` reads an applied action's stored result; ``commit`` is the APPLY script (the lane, the action's
staged writes and the fence check in one round trip). :class:`CancellablePort` also reads the event's cancel
flag (an operator's ``POST /v1/events/{id}/cancel``, worker/ops/scope_control.py) in each lookup's round trip
and stops the chain before its next action."""

from __future__ import annotations

import json
import threading
from typing import Any

from worker.chain.context import EffectBuffer
from worker.core.errors import LeaseLost, PermanentFailure, PipelineError
from worker.core.nodes import Action, ExecutorResult
from worker.documents.lane_codec import decode_lane, encode_lane
from worker.store.events import EventStore, staged_error
from worker.store.journal import journaled

__all__ = ["CancellablePort", "EventCancelled", "RedisActionPort", "lane_result"]


def lane_result(raw: bytes | None) -> ExecutorResult | None:
    """The applied action's result stored in an idempotency lane (worker/documents/lane_codec.py), or None: unmarked."""
    return None if raw is None else ExecutorResult.model_validate_json(decode_lane(raw))


class RedisActionPort:
    """Idempotency lanes in Redis, fenced by the current lease (the scheduler's :class:`ActionPort`)."""

    def __init__(self, store: EventStore, scope_key: str, fence: int, lost: Any, event_id: str = "") -> None:
        self.store = store
        self.scope_key = scope_key
        self.event_id = event_id  # what a journaled write is indexed under (erasure finds it by the event)
        self.fence = fence
        self._lost = lost  # threading.Event set by the lease renewer

    def lookup(self, action: Action, idempotency_key: str) -> ExecutorResult | None:
        return lane_result(self.store.get_bytes(self.store.keys.idempotency(self.scope_key, idempotency_key)))

    def commit(
        self, action: Action, idempotency_key: str, result: ExecutorResult, effects: EffectBuffer
    ) -> bool:
        store = self.store
        commands = effects.to_json_list()
        if store.keys.buckets > 1:  # writes to other slots are journaled (worker/store/journal.py)
            label = f"{idempotency_key}:{self.fence}"
            retention_s = store.settings.outbox_retention_s
            commands = journaled(store.keys, self.scope_key, self.event_id, label, commands, retention_s)
        effects_json = json.dumps(commands)
        reply = self.store.scripts.apply(
            keys=[
                self.store.keys.idempotency(self.scope_key, idempotency_key),
                self.store.keys.fence(self.scope_key),
            ],
            args=[
                self.fence,
                encode_lane(result.model_dump_json(by_alias=True, exclude_none=True)),
                self.store.settings.idempotency_ttl_s,
                effects_json,
            ],
        )
        code = int(reply[0])
        if code == -1:
            self.store.client.hincrby(self.store.keys.for_scope(self.scope_key).stats, "fenceRejected", 1)
            raise LeaseLost(f"scope {self.scope_key}: fence {self.fence} is stale; effect not applied")
        if code == -3:
            raise PermanentFailure(f"action {action.action_id}: {staged_error(reply)}", code="INVALID_EFFECT")
        return code == 1

    def ensure_live(self) -> None:
        if self._lost.is_set():
            raise LeaseLost(f"scope {self.scope_key}: lease lost before the next effect")


class EventCancelled(PipelineError):
    """An operator cancelled the running event: stop before the next action and commit it ``cancelled``."""


class CancellablePort(RedisActionPort):
    """The drain's action port, with the event's cancel flag read in the same round trip as each lookup."""

    def __init__(
        self, store: EventStore, scope_key: str, fence: int, lost: threading.Event, event_id: str
    ) -> None:
        super().__init__(store, scope_key, fence, lost, event_id)
        self._cancelled = False

    def lookup(self, action: Action, idempotency_key: str) -> ExecutorResult | None:
        pipe = self.store.client.pipeline(transaction=False)
        key = self.store.keys.idempotency(self.scope_key, idempotency_key)
        pipe.execute_command("GET", key, NEVER_DECODE=[])  # type: ignore[no-untyped-call]
        pipe.hexists(self.store.keys.for_scope(self.scope_key).event(self.event_id), "cancelRequested")
        raw, cancelled = pipe.execute()
        self._cancelled = bool(cancelled)
        return lane_result(raw)

    def ensure_live(self) -> None:
        super().ensure_live()
        if self._cancelled:
            raise EventCancelled(f"event {self.event_id} was cancelled before its next action")
