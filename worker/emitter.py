"""Enqueueing a source event from inside the worker (a handler raising a follow-up source, the reference
runner reporting a completion): the same validation, dedupe and drain scheduling a producer gets."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from worker.store import EventStore
from worker.tasks import publish_drain

__all__ = ["make_emitter"]


def make_emitter(store: EventStore, app: Any, queue: str) -> Callable[[dict[str, Any]], str]:
    """A function that enqueues one event dict and returns its status (accepted | duplicate)."""
    from policies.source_types import SourceTypePolicy
    from producers._models import parse_event, prepare

    types = SourceTypePolicy(
        allow_unknown=store.settings.allow_unknown_source_types, extra=store.settings.extra_source_types
    )

    def emit(event: dict[str, Any]) -> str:
        (outcome,) = store.enqueue_many([prepare(parse_event(event, types))])
        if outcome.schedule:
            publish_drain(app, outcome.scope_key, queue=queue)
        return outcome.status

    return emit
