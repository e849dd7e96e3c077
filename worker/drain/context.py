"""What every step of a drain reads: one frozen :class:`DrainContext` per process (the store, the handlers'
registry, the settings, telemetry, the plugins' typed dependencies, the emitter of follow-ups, and how to publish
a scope's drain). The tenant is not in it: it travels with the scope ref, in each lease grant's keys."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from worker.chain.context import Deps
from worker.chain.registry import Registry
from worker.intake.emitter import Emitter
from worker.settings import Settings
from worker.store.events import EventStore
from worker.store.server.full import FullStoreWait
from worker.telemetry.recorder import Telemetry

__all__ = ["DrainContext"]


@dataclass(frozen=True, slots=True)
class DrainContext:
    """The process's drain dependencies (see the module docstring)."""

    store: EventStore
    registry: Registry
    settings: Settings
    telemetry: Telemetry
    deps: Deps
    emitter: Emitter | None
    publish: Callable[[str], None]  # a drain for a scope ref (follow-ups' scopes)
    # Source types whose chains met a handler that is not batch-safe: they are not run for a batch again.
    unbatchable: set[str] = field(default_factory=set)

    def full_wait(self, where: str, lost: threading.Event | None = None) -> FullStoreWait:
        """How this process waits out a full store (worker/store/server/full.py): a quarter of a task's soft limit."""
        return FullStoreWait(where, budget_s=self.settings.task_soft_time_limit_s / 4, lost=lost)
