"""Where a chain's follow-ups run (worker/intake/emitter.py ``StagedEmits``): a chain whose event runs in its
user's own scope (a user token's event) keeps its follow-ups in that user's own scopes, derived or named, by the
door's rule; the follow-ups of other events (an API key's) keep the scope they name or derive."""

from __future__ import annotations

from typing import Any

import pytest
from redis import Redis

from worker.core.dedupe import dedupe_key, event_id_for
from worker.intake.emitter import Emitter, StagedEmits
from worker.settings import Settings
from worker.store.events import EventStore

TENANT = "acme"


def _staged(scope_key: str, user_id: str | None) -> StagedEmits:
    """The follow-ups of a chain whose event runs in ``scope_key`` for ``user_id`` (validation sends nothing)."""
    settings = Settings(env="test", redis_url="redis://127.0.0.1:6379/0")
    emitter = Emitter(settings, EventStore(Redis(), settings), lambda ref: None, source_types=["t.x"])
    staged = StagedEmits(emitter, TENANT)
    staged.confine(scope_key, user_id)
    return staged


def _follow_up(**fields: Any) -> dict[str, Any]:
    payload = {"agentId": "agt_1", "userId": "alice", "topicId": "grp_1"}
    return {"sourceType": "t.x", "sourceId": "f1", "userId": "alice", "payload": payload, **fields}


def _scope_of(staged: StagedEmits, event: dict[str, Any]) -> str:
    assert staged(event) == "staged"
    prepared = staged.events[-1]
    # its identity is the scope's: the dedupe key (and so the event id) is the one in the confined scope
    assert prepared.event_id == event_id_for(dedupe_key(prepared.scope_key, "t.x", "f1"), TENANT)
    return prepared.scope_key


OWN = "user:alice/topic:grp_1"


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, OWN),  # derived topic:grp_1, put under alice
        ({"scopeKey": "topic:grp_2"}, "user:alice/topic:grp_2"),  # named outside: put under alice too
        ({"scope_key": "topic:grp_2"}, "user:alice/topic:grp_2"),  # the field's other spelling alike
        ({"scopeKey": "user:bob"}, "user:alice/user:bob"),
        ({"scopeKey": OWN}, OWN),  # the chain's own scope, named: kept, not put under alice twice
        ({"scopeKey": "user:alice"}, "user:alice"),
        ({"payload": {"agentId": "agt_1", "userId": "alice"}}, "agent:agt_1:user:alice"),  # derived, hers
        ({"userId": "bob", "payload": {"topicId": "grp_1"}}, OWN),  # another user's follow-up: still alice's
    ],
)
def test_a_user_tokens_chain_keeps_its_follow_ups_in_the_users_own_scopes(
    fields: dict[str, Any], expected: str
) -> None:
    """Alice's event in ``user:alice/topic:grp_1``: each follow-up runs in one of alice's own scopes."""
    assert _scope_of(_staged(OWN, "alice"), _follow_up(**fields)) == expected


@pytest.mark.parametrize("scope", ["user:alice", "agent:agt_1:user:alice"])
def test_every_own_scope_form_confines(scope: str) -> None:
    """An event in its user's ``user:<id>`` or ``agent:<a>:user:<id>`` scope confines its follow-ups alike."""
    assert _scope_of(_staged(scope, "alice"), _follow_up()) == OWN


@pytest.mark.parametrize(
    ("scope", "user"),
    [
        ("topic:grp_1", "bob"),  # an API key's event in a shared topic
        ("topic:grp_1", None),
        ("user:alice/topic:grp_1", None),  # no user: nobody's own scope to keep to
        ("user:alice/topic:grp_1", "bob"),  # not bob's own scope
    ],
)
def test_other_chains_follow_ups_keep_their_scope(scope: str, user: str | None) -> None:
    """A chain whose event is not in its user's own scope: follow-ups derive or name their scope as before."""
    staged = _staged(scope, user)
    assert _scope_of(staged, _follow_up()) == "topic:grp_1"
    assert _scope_of(staged, _follow_up(scopeKey="custom:1")) == "custom:1"
