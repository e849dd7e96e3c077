"""Action idempotency: which key an action's effect is unique under.

LobeHub keys lanes ``action-idempotency::<idempotencyKey>`` within the scope, and uses the planner's
``payload.idempotencyKey`` (``<rootSourceId>:memory:<messageId>``). We do the same, and fall back to the
action's deterministic id (``<sourceId>:signal:…:action:…``) so that *every* action is idempotent per
(event, action), not only those whose planner remembered to set a key. Lanes live in Redis on every path
(LobeHub's immediate path keeps them in a per-emission map); see ``worker.drain.ports.CancellablePort``.
"""

from __future__ import annotations

import hashlib

from worker.core.nodes import Action

__all__ = ["EFFECT_KEY_PREFIX", "LANE_PREFIX", "effect_key", "idempotency_key_for", "lane_name"]

EFFECT_KEY_PREFIX = "as-effect-"

LANE_PREFIX = "action-idempotency"


def idempotency_key_for(action: Action) -> str:
    """``payload.idempotencyKey`` when it is a non-empty string, else the action id."""
    key = action.payload.get("idempotencyKey")
    if isinstance(key, str) and key:
        return key
    return action.action_id


def lane_name(key: str) -> str:
    """LobeHub's lane name for a key (used in traces and logs)."""
    return f"{LANE_PREFIX}::{key}"


def effect_key(tenant: str, user_id: str | None, scope_key: str, key: str) -> str:
    """The key an outbound call carries by default (``ctx.outbox`` without ``key=``): the action's idempotency key
    is ``<sourceId>:signal:…`` or a payload's ``idempotencyKey``, the same in every tenant, for every user and in
    every scope, so a receiver that dedupes on it would drop one tenant's (or user's, or scope's) effect as
    another's repeat (CONTRACT §Trust; a lane, like the door's dedupe, is a scope's). Hashed with the tenant, the
    user and the scope it is distinct per each, and still the same on every redelivery."""
    material = "\x1f".join((tenant, user_id or "", scope_key, key)).encode()
    return EFFECT_KEY_PREFIX + hashlib.sha256(material).hexdigest()[:32]
