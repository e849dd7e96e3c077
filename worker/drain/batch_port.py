"""The action port of a chain run for a batch commit (worker/drain/batch.py): no round trip per action.

On the slow path each action costs two round trips: the idempotency lookup (with the cancel flag) and APPLY.
An event in a batch has never been delivered, so no earlier delivery can have marked its lanes; its actions
run straight away and their results and staged effects wait here as :class:`Lane` records, which
COMMIT_BATCH applies right before it commits the event. A lane that another event marked meanwhile (two
events sharing an idempotency key) makes COMMIT_BATCH stop before that event, which then runs again on the
slow path and replays the stored result; a cancel asked for the event meanwhile makes the commit
``cancelled`` without applying its lanes, as if the cancel came before its first action.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass

from worker.chain.context import EffectBuffer
from worker.core.errors import LeaseLost
from worker.core.nodes import Action, ExecutorResult
from worker.keys.layout import Keys
from worker.store.journal import journaled

__all__ = ["BatchPort", "Lane"]


@dataclass(frozen=True, slots=True)
class Lane:
    """One applied action of a batched event: its idempotency lane key, stored result and staged effects."""

    key: str
    result_json: str
    effects_json: str


class BatchPort:
    """The scheduler's :class:`~worker.chain.context.ActionPort` for a batched event: lanes are collected, not written."""

    def __init__(
        self,
        keys: Keys,
        scope_key: str,
        lost: threading.Event,
        lanes: list[Lane],
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

    def lookup(self, action: Action, idempotency_key: str) -> ExecutorResult | None:
        """Never delivered before, so nothing of this event is applied yet, except an earlier action of this
        same chain under the same key: its result is replayed, as the slow path's lookup would."""
        key = self.keys.idempotency(self.scope_key, idempotency_key)
        for lane in self.lanes:
            if lane.key == key:
                return ExecutorResult.model_validate_json(lane.result_json)
        return None

    def commit(
        self, action: Action, idempotency_key: str, result: ExecutorResult, effects: EffectBuffer
    ) -> bool:
        commands = effects.to_json_list()
        if self.keys.buckets > 1:  # writes to other slots are journaled (worker/store/journal.py)
            label = f"{idempotency_key}:{self.fence}"
            commands = journaled(self.keys, self.scope_key, self.event_id, label, commands, self.retention_s)
        self.lanes.append(
            Lane(
                key=self.keys.idempotency(self.scope_key, idempotency_key),
                result_json=result.model_dump_json(by_alias=True, exclude_none=True),
                effects_json=json.dumps(commands),
            )
        )
        return True

    def ensure_live(self) -> None:
        if self._lost.is_set():
            raise LeaseLost(f"scope {self.scope_key}: lease lost before the next effect")
