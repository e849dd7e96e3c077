"""Helpers for action handlers to build ExecutorResults without repeating the attempt bookkeeping.

The scheduler re-stamps ``attempt`` (current, max, startedAt, completedAt, status) after the handler
returns, so handlers only say what happened.
"""

from __future__ import annotations

from typing import Any

from worker.chain.context import HandlerContext
from worker.core.nodes import (
    Action,
    Attempt,
    AttemptStatus,
    ExecutorError,
    ExecutorResult,
    ResultStatus,
    plain_object,
    trusted,
)

__all__ = ["applied", "failed", "skipped"]


def _attempt(ctx: HandlerContext, status: AttemptStatus) -> Attempt:
    """The engine's own ints and one of its statuses: built without validation (the scheduler re-stamps it)."""
    values = {
        "current": ctx.attempt,
        "max": ctx.max_attempts,
        "started_at": 0,
        "completed_at": None,
        "status": status,
    }
    return trusted(Attempt, values, {"current", "max", "started_at", "status"})


def _result(
    action: Action,
    ctx: HandlerContext,
    status: ResultStatus,
    attempt_status: AttemptStatus,
    detail: str | None,
    output: dict[str, Any] | None,
    output_given: bool,
) -> ExecutorResult:
    """An applied or skipped result: without validation when the handler's detail and output are already what
    validation makes of them (a str or None; a dict with str keys, copied, or None), else validated (and
    refused as before)."""
    attempt = _attempt(ctx, attempt_status)
    plain_detail = detail is None or type(detail) is str
    plain_output = output is None or plain_object(output)
    if not (plain_detail and plain_output):
        return ExecutorResult(
            action_id=action.action_id, status=status, attempt=attempt, detail=detail, output=output
        )
    given = {"action_id", "status", "attempt", "detail"}
    if output_given:  # the constructors before named it (applied's None too)
        given.add("output")
    values = {
        "action_id": action.action_id,
        "status": status,
        "attempt": attempt,
        "detail": detail,
        "output": None if output is None else dict(output),
        "error": None,
    }
    return trusted(ExecutorResult, values, given)


def applied(
    action: Action, ctx: HandlerContext, detail: str | None = None, output: dict[str, Any] | None = None
) -> ExecutorResult:
    """The action's effect happened (or was staged in ``ctx.effects``)."""
    return _result(action, ctx, "applied", "succeeded", detail, output, output_given=True)


def skipped(action: Action, ctx: HandlerContext, detail: str) -> ExecutorResult:
    """Nothing was done, on purpose; the lane stays unmarked."""
    return _result(action, ctx, "skipped", "skipped", detail, None, output_given=False)


def failed(
    action: Action,
    ctx: HandlerContext,
    code: str,
    message: str,
    *,
    retriable: bool = False,
    retry_after_ms: int | None = None,
) -> ExecutorResult:
    """The effect did not happen; the lane stays unmarked, and the writes and outbox calls the handler staged are
    dropped. The event goes on (and ends done): ``retriable`` and ``retry_after_ms`` are reported in the result,
    as LobeHub's are, and retry nothing. To have the event tried again, raise (``RetryLater``, or any exception:
    the backoff); ``PermanentFailure`` sends it to the dead-letter list."""
    return ExecutorResult(
        action_id=action.action_id,
        status="failed",
        attempt=_attempt(ctx, "failed"),
        detail=message,
        error=ExecutorError(code=code, message=message, retriable=retriable, retry_after_ms=retry_after_ms),
    )
