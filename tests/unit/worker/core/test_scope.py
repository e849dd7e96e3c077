"""Scope key derivation follows LobeHub's producer order."""

from __future__ import annotations

import pytest

from worker.core.scope import derive_scope_key


@pytest.mark.parametrize(
    ("payload", "kwargs", "expected"),
    [
        ({"topicId": "tpc_1", "taskId": "t", "agentId": "a", "userId": "u"}, {}, "topic:tpc_1"),
        ({"taskId": "task_7", "agentId": "a", "userId": "u"}, {}, "task:task_7"),
        ({"platform": "slack", "applicationId": "app", "platformThreadId": "th"}, {}, "bot:slack:app:th"),
        ({"platform": "slack", "applicationId": "app"}, {"user_id": "u"}, "user:u"),
        ({"agentId": "agt_1", "userId": "u1"}, {}, "agent:agt_1:user:u1"),
        ({}, {"agent_id": "agt_1", "user_id": "u1"}, "agent:agt_1:user:u1"),
        ({"agentId": "agt_1"}, {}, "fallback:global"),
        ({"userId": "u1"}, {}, "user:u1"),
        ({"topicId": ""}, {}, "fallback:global"),
        ({}, {}, "fallback:global"),
    ],
)
def test_derive_scope_key(payload: dict[str, str], kwargs: dict[str, str], expected: str) -> None:
    """Each rung of the ladder wins over the ones below it; incomplete bot triples fall through."""
    assert derive_scope_key(payload, **kwargs) == expected
