"""Scope keys: which events must run one at a time, in order.

Derived when the producer gives none, in LobeHub's order (``getSourceEventScopeKey``):
``topic:<topicId>`` → ``task:<taskId>`` → ``bot:<platform>:<applicationId>:<platformThreadId>`` (all three
required) → ``agent:<agentId>:user:<userId>`` → ``user:<userId>`` → ``fallback:global``.
``agentId``/``userId`` are read from the payload first, then from the event's envelope fields.

A user's own scopes (:func:`is_own_scope`) are ``user:<id>``, ``agent:<agentId>:user:<id>`` and every scope under
``user:<id>/``. A user token's events run in them (the door), and so do the follow-ups a chain of an event in its
user's own scope emits (the drain's ``StagedEmits``): :func:`own_scope_key` puts any other scope under
``user:<id>/``, so one user's events never reach another's scope, inbox or dedupe identities. (No user id holds
``:`` or ``/``, worker/core/ids.py, so ``user:<id>/…`` is never another user's own scope.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["confined_scope_key", "derive_scope_key", "is_own_scope", "own_scope_key"]


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


def is_own_scope(scope_key: str, user_id: str) -> bool:
    """Whether ``scope_key`` is one of ``user_id``'s own scopes: ``user:<id>``, ``agent:<a>:user:<id>``, or one
    under ``user:<id>/`` (where :func:`own_scope_key` puts the others)."""
    own = f"user:{user_id}"
    return (
        scope_key == own
        or scope_key.startswith(f"{own}/")
        or (scope_key.startswith("agent:") and scope_key.endswith(f":{own}"))
    )


def own_scope_key(scope_key: str, user_id: str) -> str:
    """``scope_key`` when it is one of ``user_id``'s own scopes, else the same scope under ``user:<id>/``."""
    return scope_key if is_own_scope(scope_key, user_id) else f"user:{user_id}/{scope_key}"


def confined_scope_key(
    given: str | None,
    payload: Mapping[str, Any],
    *,
    own_user: str,
    user_id: str | None,
    agent_id: str | None,
) -> str:
    """The scope an event runs in when it must stay in ``own_user``'s own scopes (a user token's at the door, a
    follow-up of its chain in the drain): the one it names, else the one derived from its payload (with its
    ``user_id`` and ``agent_id``), under ``user:<own_user>/`` unless it is one of the user's own already."""
    return own_scope_key(given or derive_scope_key(payload, user_id=user_id, agent_id=agent_id), own_user)
