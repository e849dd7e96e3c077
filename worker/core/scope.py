"""Scope keys: which events must run one at a time, in order.

Derived when the producer gives none, in LobeHub's order (``getSourceEventScopeKey``):
``topic:<topicId>`` → ``task:<taskId>`` → ``bot:<platform>:<applicationId>:<platformThreadId>`` (all three
required) → ``agent:<agentId>:user:<userId>`` → ``user:<userId>`` → ``fallback:global``.
``agentId``/``userId`` are read from the payload first, then from the event's envelope fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["derive_scope_key"]


def _text(value: Any) -> str | None:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def derive_scope_key(
    payload: Mapping[str, Any], *, user_id: str | None = None, agent_id: str | None = None
) -> str:
    """The scope key for an event without an explicit ``scopeKey``."""
    topic = _text(payload.get("topicId"))
    if topic:
        return f"topic:{topic}"
    task = _text(payload.get("taskId"))
    if task:
        return f"task:{task}"
    platform = _text(payload.get("platform"))
    application = _text(payload.get("applicationId"))
    thread = _text(payload.get("platformThreadId"))
    if platform and application and thread:
        return f"bot:{platform}:{application}:{thread}"
    agent = _text(payload.get("agentId")) or agent_id
    user = _text(payload.get("userId")) or user_id
    if agent and user:
        return f"agent:{agent}:user:{user}"
    if user:
        return f"user:{user}"
    return "fallback:global"
