"""The self-iteration feature gate: ``AGENT_SIGNAL_SELF_ITERATION_ENABLED`` (default on) with a per-user
override in Redis (``PUT /v1/features/self-iteration/{userId}``). Checked at the door (gated events are not
enqueued: ``status: "gated"``) and in the worker (skill actions skip "Self iteration is disabled.",
self-iteration sources skip ``gate_disabled``, deferred synthesis does nothing). LobeHub only checks it at
emit/enqueue time (reference §0.6)."""

from __future__ import annotations

from typing import Any

from worker.keys import Keys

__all__ = ["GATED_SOURCE_TYPES", "self_iteration_enabled", "set_override"]

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


def self_iteration_enabled(client: Any, keys: Keys, default: bool, user_id: str | None) -> bool:
    """The user's override when there is one, else the setting. Errors mean disabled (as LobeHub)."""
    if not user_id:
        return default
    try:
        value = client.hget(keys.self_iteration_overrides, user_id)
    except Exception:
        return False
    if value is None:
        return default
    return str(value.decode() if isinstance(value, bytes) else value) == "1"


def set_override(client: Any, keys: Keys, user_id: str, enabled: bool | None) -> None:
    if enabled is None:
        client.hdel(keys.self_iteration_overrides, user_id)
    else:
        client.hset(keys.self_iteration_overrides, user_id, "1" if enabled else "0")
