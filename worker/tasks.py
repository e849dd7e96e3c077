"""The Celery tasks: thin wrappers that parse arguments, call plain functions, and publish follow-ups.

``agent_signal.drain(scopeKey)`` drains one scope (worker.pipeline); ``agent_signal.agent_run`` runs the
reference agent for a self-iteration run request; ``agent_signal.noop`` is the benchmark baseline. Tasks return None: nobody consumes results.
"""

from __future__ import annotations

import logging
from typing import Any

from policies.self_iteration.runners import AGENT_RUN_TASK
from worker import _state

__all__ = ["DRAIN_TASK", "NOOP_TASK", "publish_drain", "register_tasks"]

DRAIN_TASK = "agent_signal.drain"
NOOP_TASK = "agent_signal.noop"

log = logging.getLogger(__name__)


def publish_drain(app: Any, scope_key: str, *, countdown_s: float = 0.0, queue: str | None = None) -> None:
    """Ask a worker to drain ``scope_key`` (one small JSON message)."""
    options: dict[str, Any] = {}
    if countdown_s > 0:
        options["countdown"] = countdown_s
    if queue:
        options["queue"] = queue
    app.send_task(DRAIN_TASK, args=[scope_key], **options)


def run_reference(pipeline: Any, request_json: dict[str, Any]) -> None:
    """Run the reference agent and enqueue its completion like any producer would (deduped by source id)."""
    from policies.self_iteration.reference_agent import completion_event, run_reference_agent
    from policies.self_iteration.runners import RunRequest
    from worker.documents import DocumentStore

    store = pipeline.store
    request = RunRequest.from_json_dict(request_json)
    self_iteration = run_reference_agent(DocumentStore(store.client, store.keys), request)
    pipeline.services["emit"](completion_event(request, self_iteration))


def register_tasks(app: Any, queue: str) -> None:
    """Register the tasks on ``app`` (called by the factory, never at import)."""

    @app.task(name=DRAIN_TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True)  # type: ignore[untyped-decorator]
    def drain(scope_key: str) -> None:
        if not isinstance(scope_key, str) or not scope_key:
            log.error("drain called without a scope key: %r", scope_key)
            return
        outcome = _state.get().drain(scope_key)
        if outcome.next in ("again", "busy"):
            publish_drain(app, scope_key, countdown_s=outcome.delay_s, queue=queue)
        elif outcome.next == "lost":
            # Our lease lapsed (paused past its TTL, or Redis lost it). Whoever holds the scope now drains
            # it; if nobody does, this follow-up will, once the holder's lease has run out.
            publish_drain(app, scope_key, countdown_s=1.0, queue=queue)

    @app.task(name=AGENT_RUN_TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True)  # type: ignore[untyped-decorator]
    def agent_run(request: dict[str, Any]) -> None:
        """The reference agent: do the run, then report agent.execution.completed (the app's job otherwise)."""
        run_reference(_state.get(), request)

    @app.task(name=NOOP_TASK, ignore_result=True)  # type: ignore[untyped-decorator]
    def noop(*args: Any) -> None:
        return None
