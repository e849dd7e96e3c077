"""The self-iteration feature gate: ``AGENT_SIGNAL_SELF_ITERATION_ENABLED`` (default on) with a per-user
override in Redis (``PUT /v1/features/self-iteration/{userId}``). Checked at the door by the plugin's
admission hook (gated events are not enqueued: ``status: "gated"``) and in the worker (memory and skill actions
skip "Self iteration is disabled.", the satisfaction judge and self-iteration sources skip ``gate_disabled``,
deferred synthesis does nothing), so a gate turned off while an event waits (a paused scope, a backlog) holds.
LobeHub only checks it at emit/enqueue time (reference §0.6)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from policies.self_iteration.keys import SelfIterationKeys
from worker.plugin import Keys

__all__ = ["GATED_SOURCE_TYPES", "enabled_for", "set_override"]

GATED_SOURCE_TYPES = frozenset(
    {
        "agent.user.message",
        "agent.nightly_review.requested",
        "agent.self_reflection.requested",
        "agent.self_feedback_intent.declared",
        "client.runtime.start",
        "client.runtime.complete",
    }
)


def enabled_for(
    client: Any, keys: Keys, default: bool, user_ids: Sequence[str | None], *, strict: bool = False
) -> list[bool]:
    """Each user's override when there is one, else the setting, in one round trip. A store error means
    disabled where the worker checks the gate itself (as LobeHub: an action skips); with ``strict`` (the
    admission hook: the door, and a handler's follow-up events) it is raised: answering ``gated`` for an event
    whose gate could not even be read dropped it without a word, where the caller must hear that the store is
    unavailable (the door's 503) or try again (a handler's error: its event retries)."""
    known = [u for u in user_ids if u]
    if not known:
        return [default for _ in user_ids]
    try:
        values = dict(zip(known, client.hmget(SelfIterationKeys(keys).overrides, known), strict=True))
    except Exception:
        if strict:
            raise
        return [False for _ in user_ids]
    out = []
    for user in user_ids:
        value = values.get(user) if user else None
        out.append(default if value is None else _text(value) == "1")
    return out


def _text(value: Any) -> str:
    return str(value.decode() if isinstance(value, bytes) else value)


def set_override(client: Any, keys: Keys, user_id: str, enabled: bool | None) -> None:
    if enabled is None:
        client.hdel(SelfIterationKeys(keys).overrides, user_id)
    else:
        client.hset(SelfIterationKeys(keys).overrides, user_id, "1" if enabled else "0")
