"""Helpers for action handlers to build ExecutorResults without repeating the attempt bookkeeping.

The scheduler re-stamps ``attempt`` (current, max, startedAt, completedAt, status) after the handler
returns, so handlers only say what happened.
"""

from __future__ import annotations

from typing import Any

from worker.chain.context import HandlerContext
from worker.core.nodes import Action, Attempt, AttemptStatus, ExecutorError, ExecutorResult

__all__ = ["applied", "failed", "skipped"]


def _attempt(ctx: HandlerContext, status: AttemptStatus) -> Attempt:
    return Attempt(current=ctx.attempt, max=ctx.max_attempts, started_at=0, status=status)


def applied(
    action: Action, ctx: HandlerContext, detail: str | None = None, output: dict[str, Any] | None = None
) -> ExecutorResult:
    """The action's effect happened (or was staged in ``ctx.effects``)."""
    return ExecutorResult(
        action_id=action.action_id,
        status="applied",
        attempt=_attempt(ctx, "succeeded"),
        detail=detail,
        output=output,
    )


def skipped(action: Action, ctx: HandlerContext, detail: str) -> ExecutorResult:
    """Nothing was done, on purpose; the lane stays unmarked."""
    return ExecutorResult(
        action_id=action.action_id, status="skipped", attempt=_attempt(ctx, "skipped"), detail=detail
    )


def failed(
    action: Action,
    ctx: HandlerContext,
    code: str,
    message: str,
    *,
    retriable: bool = False,
    retry_after_ms: int | None = None,
) -> ExecutorResult:
    """The effect did not happen; the lane stays unmarked. ``retriable`` is reported (LobeHub never sets it)."""
    return ExecutorResult(
        action_id=action.action_id,
        status="failed",
        attempt=_attempt(ctx, "failed"),
        detail=message,
        error=ExecutorError(code=code, message=message, retriable=retriable, retry_after_ms=retry_after_ms),
    )
