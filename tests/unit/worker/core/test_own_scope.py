"""A user's own scopes, the one rule the door (a user token's events) and the drain (their chains' follow-ups)
keep a user's events in: ``user:<id>``, ``agent:<a>:user:<id>`` and anything under ``user:<id>/``."""

from __future__ import annotations

import pytest

from worker.core.scope import is_own_scope, own_scope_key


@pytest.mark.parametrize(
    ("scope", "own"),
    [
        ("user:alice", True),
        ("agent:agt_1:user:alice", True),
        ("user:alice/topic:grp_1", True),
        ("user:alice/user:bob", True),  # bob's scope as alice named it: under hers
        ("topic:grp_1", False),
        ("user:bob", False),
        ("agent:agt_1:user:bob", False),
        ("user:bob/topic:grp_1", False),
        ("user:alicex", False),  # another user whose id starts with alice's
        ("user:alicex/topic:grp_1", False),
        ("user:alice:x", False),
        ("fallback:global", False),
    ],
)
def test_is_own_scope(scope: str, own: bool) -> None:
    """Only the user's own forms are its own: never another user's, nor one whose id merely starts with it."""
    assert is_own_scope(scope, "alice") is own


@pytest.mark.parametrize(
    ("scope", "expected"),
    [
        ("topic:grp_1", "user:alice/topic:grp_1"),
        ("user:bob", "user:alice/user:bob"),
        ("agent:agt_1:user:bob", "user:alice/agent:agt_1:user:bob"),
        ("user:alice", "user:alice"),
        ("agent:agt_1:user:alice", "agent:agt_1:user:alice"),
        ("user:alice/topic:grp_1", "user:alice/topic:grp_1"),  # already hers: not put under it twice
    ],
)
def test_own_scope_key_puts_a_foreign_scope_under_the_user(scope: str, expected: str) -> None:
    """A scope outside the user's own goes under ``user:<id>/``; one of its own is kept as it is."""
    assert own_scope_key(scope, "alice") == expected
