"""rolebox's continuation decision (``continuation.ts``, reference §1.7): why a function may not be
auto-continued, and what the reminder says when it is.

Blocked reasons in order: "global cap" (the session's continuations reached 25), "per-fn cap"
(``continue_max``, default 5), "loop detected", "model asked a question", "cooldown". Continuing increments the
count; at the 3rd and 5th continuation a cooldown of 1 and 3 turns starts; the last allowed one says it is
the FINAL continuation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sessions.functions import FunctionDef
    from sessions.runtime import FnState

__all__ = [
    "COOLDOWN_RULES",
    "DEFAULT_REASON",
    "GLOBAL_MAX_CONTINUATIONS",
    "blocking_reason",
    "continue_function",
]

GLOBAL_MAX_CONTINUATIONS = 25
COOLDOWN_RULES: tuple[tuple[int, int], ...] = ((3, 1), (5, 3))  # (atCount, cooldownTurns)
DEFAULT_REASON = "completion condition not yet met"


def blocking_reason(st: FnState, fn: FunctionDef, burst: int, identical: bool, question: bool) -> str | None:
    if burst >= GLOBAL_MAX_CONTINUATIONS:
        return "global cap"
    if st.continuation_count >= fn.continue_max:
        return "per-fn cap"
    if identical:
        return "loop detected"
    if question:
        return "model asked a question"
    if st.current_turn < st.cooldown_until_turn:
        return "cooldown"
    return None


def continue_function(st: FnState, fn: FunctionDef, name: str) -> str:
    st.continuation_count += 1
    for at_count, turns in COOLDOWN_RULES:
        if st.continuation_count == at_count:
            st.cooldown_until_turn = st.current_turn + turns
    final = (
        " This is your FINAL continuation — produce your output NOW, even if incomplete."
        if st.continuation_count >= fn.continue_max
        else ""
    )
    return (
        f"<system-reminder>[auto-continue {st.continuation_count}/{fn.continue_max} for {name}: {DEFAULT_REASON}] "
        f"Continue until this function's completion condition is met. Do not stop yet.{final}</system-reminder>"
    )
