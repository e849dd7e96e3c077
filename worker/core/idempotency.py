"""Action idempotency: which key an action's effect is unique under.

LobeHub keys lanes ``action-idempotency::<idempotencyKey>`` within the scope, and uses the planner's
``payload.idempotencyKey`` (``<rootSourceId>:memory:<messageId>``). We do the same, and fall back to the
action's deterministic id (``<sourceId>:signal:…:action:…``) so that *every* action is idempotent per
(event, action), not only those whose planner remembered to set a key. Lanes live in Redis on every path
(LobeHub's immediate path keeps them in a per-emission map); see ``worker.drain.ports.CancellablePort``.

An event is one ``(scopeKey, sourceType, sourceId)`` (the door's dedupe), and an action id names the ``sourceId``
only, so two events of one scope with one ``sourceId`` and two source types dispatch actions of one id: under
that key alone the second one's action read the first one's lane as its own and never ran. An event's *typed*
lanes put its source type before the action id (``<sourceType>:<actionId>``). Which events are typed is decided
once per event, when it is first begun (worker/store/lua/lib/take_head.lua, its ``typedLanes`` mark): every
event delivered for the first time since the mark is; one that a worker of before began (a later attempt, a
redrive of a dead one) keeps the keys that worker wrote, so its next run finds what it applied and never applies
it again. A planner's ``payload.idempotencyKey`` is the plugin's own choice of what is one effect, across events
too, but one user's: a scope may be two users' (a topic they share), and under the key alone one user's event
took a lane another user's event then replayed as its own, its action never run (a derived-id walk). So the
mark says which *form* an event's keys take (:data:`LANE_FORM`, the form new events get):

* 0 (no mark, an event a worker of before typed lanes began): the action id, or the payload's key as it is;
* 1 (``typedLanes`` ``1``): ``<sourceType>:<actionId>``, or the payload's key as it is;
* 2 (``typedLanes`` ``2``): ``<sourceType>:<actionId>``, or ``u=<userId>:<key>`` (``u=:<key>`` for an event of no
  user; a user id holds no ``:``, and a source type no ``=``, so no key of one shape is one of another).

A payload key dedupes across one user's events, so an event of one form must find what an event of the other
applied under the same key (an order of before and one of after the upgrade sharing a charge key would charge
twice): a lookup reads the key's other form too (:func:`idempotency_aliases`), and replays a lane found there.
Such a lane under the bare key may be another user's (the fault form 2 closes): it is read only where an event
of before wrote it, for as long as lanes of before live. A bare key that starts as a form-2 key does
(``u=<user>:``) is never read as the other form: it is that user's lane of the rest of the key, and a producer
can choose such a key (an upgrade walk made alice's order replay bob's charge with the key ``u=bob:<his key>``).
An event of before whose own bare key has that shape still shares that user's lane, until events of before end.
"""

from __future__ import annotations

import hashlib
import re

from worker.core.nodes import Action

__all__ = [
    "EFFECT_KEY_PREFIX",
    "LANE_FORM",
    "LANE_PREFIX",
    "TYPED_LANES_FIELD",
    "effect_key",
    "idempotency_aliases",
    "idempotency_key_for",
    "is_user_form",
    "lane_action_id",
    "lane_form_of",
    "lane_name",
]

EFFECT_KEY_PREFIX = "as-effect-"

LANE_PREFIX = "action-idempotency"

# an event hash's mark: the form of its lanes' keys (worker/store/lua/lib/take_head.lua writes LANE_FORM)
TYPED_LANES_FIELD = "typedLanes"
LANE_FORM = 2  # the form an event first begun now is marked with (the docstring above)
_USER_FORM = re.compile(r"u=[^:]*:")  # a form-2 payload key's start: a user id holds no ``:``


def lane_form_of(mark: str | None) -> int:
    """The key form an event's ``typedLanes`` mark names (the hash's field, or take_head's reply): 0 for none, or
    for anything that is no form's digit."""
    return int(mark) if mark and mark.isdigit() else 0


def idempotency_key_for(action: Action, *, form: int = LANE_FORM, user_id: str | None = None) -> str:
    """The key of ``action``'s lane in the key ``form`` of its event (the docstring above), whose user is
    ``user_id``: from ``payload.idempotencyKey`` when it is a non-empty string, else from the action's id."""
    key = action.payload.get("idempotencyKey")
    if isinstance(key, str) and key:
        return f"u={user_id or ''}:{key}" if form >= 2 else key
    if form >= 1:
        return f"{action.source.source_type}:{action.action_id}"
    return action.action_id


def idempotency_aliases(
    action: Action, *, form: int = LANE_FORM, user_id: str | None = None
) -> tuple[str, ...]:
    """The other key a payload key's lane may be under, the one of the other form (module docstring); none for an
    action without a payload key (its key is the same in forms 1 and 2, and an untyped one is its event's own)."""
    key = action.payload.get("idempotencyKey")
    if not isinstance(key, str) or not key:
        return ()
    if form < 2:
        return (idempotency_key_for(action, form=LANE_FORM, user_id=user_id),)
    # a bare key of today's shape (``u=bob:K``) is also the lane of bob's key ``K`` (an upgrade walk: alice's event
    # with that key replayed bob's charge): the producer chose it, so it is not read as a lane of before
    return () if is_user_form(key) else (key,)


def is_user_form(key: str) -> bool:
    """True when a payload key starts as a form-2 key does (``u=<user>:``): as a bare key of before it would be
    that user's lane (:func:`idempotency_aliases`)."""
    return _USER_FORM.match(key) is not None


def lane_action_id(action: Action) -> str:
    """The action id a lane's stored result leaves out (worker/documents/lane_codec.py) and a reader puts back: the
    planner's ``idempotencyKey`` when it set one (left out only when the action's own id is that key), else the
    action's id. The same in every form, so a lane reads the same under any key."""
    return idempotency_key_for(action, form=0)


def lane_name(key: str) -> str:
    """LobeHub's lane name for a key (used in traces and logs)."""
    return f"{LANE_PREFIX}::{key}"


def effect_key(tenant: str, user_id: str | None, scope_key: str, key: str) -> str:
    """The key an outbound call carries by default (``ctx.outbox`` without ``key=``): the action's idempotency key
    is ``<sourceType>:<sourceId>:signal:…`` (typed), ``<sourceId>:signal:…`` or a payload's ``idempotencyKey``, the
    same in every tenant, for every user and in every scope, so a receiver that dedupes on it would drop one tenant's (or user's, or scope's) effect as
    another's repeat (CONTRACT §Trust; a lane, like the door's dedupe, is a scope's). Hashed with the tenant, the
    user and the scope it is distinct per each, and still the same on every redelivery."""
    material = "\x1f".join((tenant, user_id or "", scope_key, key)).encode()
    return EFFECT_KEY_PREFIX + hashlib.sha256(material).hexdigest()[:32]
