"""The action ports a drain hands the scheduler (:class:`~worker.chain.context.ActionPort`): where an action's
idempotency lane is looked up and its applied result and staged writes are committed.

* :class:`CancellablePort`, an event run alone: ``lookup`` reads the lane and the event's cancel flag (an
  operator's ``POST /v1/events/{id}/cancel``, worker/ops/scope_control.py) in one round trip, ``commit`` is APPLY
  (the lane, the action's staged writes and the fence check in one round trip), and ``ensure_live`` stops the
  chain before its next action when the lease was lost or the event cancelled.
* :class:`BatchPort`, an event of a run (worker/drain/pipeline.py): it has never been delivered, so no earlier
  delivery can have marked its lanes; its actions run straight away and their results and staged writes wait
  here as :class:`BatchLane` records, which COMMIT applies right before it commits the event. A lane that another
  event marked meanwhile (two events sharing an idempotency key) makes COMMIT stop before that event, which then
  runs again alone and replays the stored result; a cancel asked for the event meanwhile makes the commit
  ``cancelled`` without applying its lanes, as if the cancel came before its first action.

With scope buckets, what an action writes to another slot is journaled (worker/store/journal.py).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence

from worker.chain.context import EffectBuffer
from worker.core.errors import LeaseLost, PermanentFailure, PipelineError
from worker.core.idempotency import lane_action_id
from worker.core.nodes import Action, ExecutorResult
from worker.core.record import record
from worker.documents.chain_codec import StoredForm
from worker.documents.lane_codec import encode_lane, lane_json, lane_result
from worker.keys.layout import BucketKeys, Keys
from worker.store.calls import Apply, Lane
from worker.store.events import EventStore, staged_error
from worker.store.journal import journaled
from worker.store.replies import ApplyCode

__all__ = ["BatchLane", "BatchPort", "CancellablePort", "EventCancelled"]


class EventCancelled(PipelineError):
    """An operator cancelled the running event: stop before the next action and commit it ``cancelled``."""


def _commands(
    keys: Keys,
    scope_key: str,
    event_id: str,
    idempotency_key: str,
    fence: int,
    effects: EffectBuffer,
    retention_s: int,
) -> list[list[str]]:
    """An action's staged writes as the scripts take them (journaled where they belong to another slot)."""
    commands = effects.to_json_list()
    if keys.buckets > 1:
        commands = journaled(keys, scope_key, event_id, f"{idempotency_key}:{fence}", commands, retention_s)
    return commands


class CancellablePort:
    """Idempotency lanes in Redis, fenced by the current lease, with the event's cancel flag (module docstring).
    ``keys`` are the scope's (its tenant's, its bucket's)."""

    def __init__(
        self,
        store: EventStore,
        keys: BucketKeys,
        scope_key: str,
        fence: int,
        lost: threading.Event,
        event_id: str,
    ) -> None:
        self.store = store
        self.keys = keys
        self.scope_key = scope_key
        self.fence = fence
        self.event_id = event_id  # what a journaled write is indexed under (erasure finds it by the event)
        self._lost = lost  # set by the lease renewer
        self._cancelled = False
        # the lanes this run found marked or marked itself: kept as long as the event, should it die
        self.marked: dict[str, None] = {}

    def lookup(
        self, action: Action, idempotency_key: str, aliases: Sequence[str] = ()
    ) -> ExecutorResult | None:
        """The lane under the key, else under an alias (the key's other form), and the cancel flag: one round
        trip. A lane found is marked (kept with the event, should it die), whichever key it is under."""
        lanes = [self.keys.idempotency(self.scope_key, key) for key in (idempotency_key, *aliases)]
        pipe = self.store.client.pipeline(transaction=False)
        for lane in lanes:
            pipe.execute_command("GET", lane, NEVER_DECODE=[])  # type: ignore[no-untyped-call]
        pipe.hexists(self.keys.event(self.event_id), "cancelRequested")
        *raws, cancelled = pipe.execute()
        self._cancelled = bool(cancelled)
        for lane, raw in zip(lanes, raws, strict=True):
            if raw is not None:
                self.marked[lane] = None
                return lane_result(raw, lane_action_id(action))
        return None

    def commit(
        self, action: Action, idempotency_key: str, result: ExecutorResult, effects: EffectBuffer
    ) -> bool:
        settings = self.store.settings
        commands = _commands(
            self.keys,
            self.scope_key,
            self.event_id,
            idempotency_key,
            self.fence,
            effects,
            settings.outbox_retention_s,
        )
        reply = self.store.scripts.run(
            Apply(
                lane=self.keys.idempotency(self.scope_key, idempotency_key),
                fence_key=self.keys.fence(self.scope_key),
                event=self.keys.event(self.event_id),
                lane_holders=self.keys.lane_holders,
                fence=self.fence,
                result_json=encode_lane(lane_json(result, lane_action_id(action)), settings.stored_form),
                effects_json=json.dumps(commands),
            )
        )
        code = ApplyCode(int(reply[0]))
        if code is ApplyCode.STALE_FENCE:
            if self.store.client.exists(self.keys.stats):  # a deleted tenant's counters stay gone
                self.store.client.hincrby(self.keys.stats, "fenceRejected", 1)
            raise LeaseLost(f"scope {self.scope_key}: fence {self.fence} is stale; effect not applied")
        if code is ApplyCode.REFUSED:
            raise PermanentFailure(f"action {action.action_id}: {staged_error(reply)}", code="INVALID_EFFECT")
        self.marked[self.keys.idempotency(self.scope_key, idempotency_key)] = None  # ours, or taken meanwhile
        return code is ApplyCode.APPLIED

    def ensure_live(self) -> None:
        if self._lost.is_set():
            raise LeaseLost(f"scope {self.scope_key}: lease lost before the next effect")
        if self._cancelled:
            raise EventCancelled(f"event {self.event_id} was cancelled before its next action")


@record
class BatchLane:
    """One applied action of an event of a run: its idempotency lane key, its result's JSON as the lane stores it
    (:func:`~worker.documents.lane_codec.lane_json`, before compressing) and staged writes."""

    key: str
    result_json: str
    effects_json: str
    alias: str = ""  # the lane's key in its other form: COMMIT finds the lane taken when that exists

    def layout(self, form: StoredForm) -> Lane:
        """The lane as COMMIT takes it (its result in the lane's stored ``form``)."""
        return Lane(self.key, encode_lane(self.result_json, form), self.effects_json, self.alias)


class BatchPort:
    """The scheduler's port for an event of a run: lanes are collected, not written (module docstring)."""

    def __init__(
        self,
        keys: BucketKeys,
        scope_key: str,
        lost: threading.Event,
        lanes: list[BatchLane],
        *,
        retention_s: int,
        event_id: str = "",
        fence: int = 0,
    ) -> None:
        self.keys = keys
        self.fence = fence
        self.event_id = event_id
        self.retention_s = retention_s  # journal records' (worker/store/journal.py)
        self.scope_key = scope_key
        self._lost = lost
        self.lanes = lanes
        # lane -> its key in the other form, from the lookup before its commit
        self._aliases: dict[str, str] = {}

    def lookup(
        self, action: Action, idempotency_key: str, aliases: Sequence[str] = ()
    ) -> ExecutorResult | None:
        """Never delivered before, so nothing of this event is applied yet, except an earlier action of this
        same chain under the same key: its result is replayed, as the slow path's lookup would. Another event may
        have applied it under the key's other form (``aliases``: a payload key): COMMIT checks that lane with this
        one, and finds it taken (the event then runs alone, and its lookup replays it)."""
        key = self.keys.idempotency(self.scope_key, idempotency_key)
        if aliases:
            self._aliases[key] = self.keys.idempotency(self.scope_key, aliases[0])
        for lane in self.lanes:
            if lane.key == key:
                return lane_result(lane.result_json.encode("utf-8"), lane_action_id(action))
        return None

    def commit(
        self, action: Action, idempotency_key: str, result: ExecutorResult, effects: EffectBuffer
    ) -> bool:
        commands = _commands(
            self.keys, self.scope_key, self.event_id, idempotency_key, self.fence, effects, self.retention_s
        )
        key = self.keys.idempotency(self.scope_key, idempotency_key)
        self.lanes.append(
            BatchLane(
                key=key,
                result_json=lane_json(result, lane_action_id(action)),
                effects_json=json.dumps(commands),
                alias=self._aliases.get(key, ""),
            )
        )
        return True

    def ensure_live(self) -> None:
        if self._lost.is_set():
            raise LeaseLost(f"scope {self.scope_key}: lease lost before the next effect")
