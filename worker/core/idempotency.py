"""Action idempotency: which key an action's effect is unique under.

LobeHub keys lanes ``action-idempotency::<idempotencyKey>`` within the scope, and uses the planner's
``payload.idempotencyKey`` (``<rootSourceId>:memory:<messageId>``). We do the same, and fall back to the
action's deterministic id (``<sourceId>:signal:…:action:…``) so that *every* action is idempotent per
(event, action), not only those whose planner remembered to set a key. Lanes live in Redis on every path
(LobeHub's immediate path keeps them in a per-emission map); see ``worker.drain.ports.CancellablePort``.
"""

from __future__ import annotations

from worker.core.nodes import Action

__all__ = ["LANE_PREFIX", "idempotency_key_for", "lane_name"]

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
