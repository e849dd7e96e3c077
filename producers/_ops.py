"""Operations shared by the CLI and the HTTP API: redriving dead events."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from producers._client import Producer

__all__ = ["redrive_events"]


def redrive_events(producer: Producer, event_ids: Sequence[str] | None) -> dict[str, Any]:
    """Requeue the given dead events (all of them when ``event_ids`` is None), each at its scope's tail.

    The event keeps its id and dedupe record; its attempts restart at 0; actions it already applied stay
    applied (their idempotency lanes are untouched), so a redrive can only finish what failed.
    """
    store = producer.store
    ids = list(event_ids) if event_ids is not None else store.dlq_ids()
    redriven: list[str] = []
    not_dead: list[str] = []
    scheduled: set[str] = set()
    for event_id in ids:
        ok, scope_key, publish = store.redrive(event_id)
        if not ok or scope_key is None:
            not_dead.append(event_id)
            continue
        redriven.append(event_id)
        if publish and scope_key not in scheduled:
            scheduled.add(scope_key)
            producer.fair.publish(store.keys.scope_ref(scope_key))
    return {"redriven": redriven, "notDead": not_dead}
