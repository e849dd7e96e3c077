"""A session's settings ``functions`` over HTTP on a real Redis: each known function once, a bounded list, and
the stored list is the locked set as it stands."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from producers.http.app import create_web_app
from producers.http.routes.sessions import MAX_SESSION_FUNCTIONS
from sessions.store import session_scope
from tests.conftest import ROOT
from worker.keys.layout import BucketKeys

pytestmark = pytest.mark.integration
FUNCTIONS = ROOT / "examples" / "functions"


@pytest.fixture
def client(make_settings: Any) -> Iterator[TestClient]:
    with TestClient(create_web_app(make_settings(functions_dir=str(FUNCTIONS)))) as c:
        yield c


@pytest.mark.parametrize(
    ("functions", "fragment"),
    [
        (["approval", "escalation", "approval"], "'approval' is there twice"),
        (["approval"] * (MAX_SESSION_FUNCTIONS + 1), f"at most {MAX_SESSION_FUNCTIONS} items"),
    ],
)
def test_a_function_named_twice_or_a_list_past_its_cap_is_refused(
    client: TestClient, redis_client: Redis, keys: BucketKeys, functions: list[str], fragment: str
) -> None:
    """600,000 copies of one known name were stored in the settings (6.6 MB a session, counted toward no
    quota); now a 422 naming ``functions``, nothing stored."""
    answer = client.put("/v1/sessions/s-big", json={"functions": functions})
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["field"] == "functions" and fragment in error["message"], error
    assert redis_client.exists(keys.session(session_scope("s-big"))) == 0


def test_the_settings_answer_the_locked_set_as_it_stands(
    client: TestClient, redis_client: Redis, keys: BucketKeys
) -> None:
    """``functions: []`` answered ``[]`` while the function stayed locked; a function the list drops is now
    unlocked (it stays active until a transition or a deactivate ends it)."""
    assert (
        client.put("/v1/sessions/s-lock", json={"functions": ["approval", "escalation"]}).status_code == 200
    )
    assert client.put("/v1/sessions/s-lock", json={"functions": ["escalation"]}).json()["functions"] == [
        "escalation"
    ]
    stored = json.loads(redis_client.get(keys.functions_state(session_scope("s-lock"))) or "{}")
    assert stored["locked"] == ["escalation"]
    assert sorted(stored["active"]) == ["approval", "escalation"]
    assert client.put("/v1/sessions/s-lock", json={"functions": []}).json()["functions"] == []
    stored = json.loads(redis_client.get(keys.functions_state(session_scope("s-lock"))) or "{}")
    assert stored["locked"] == []


def test_deactivating_a_function_nobody_defined_is_refused_as_activating_it_is(client: TestClient) -> None:
    for route in ("activate", "deactivate"):
        answer = client.post(f"/v1/sessions/s-ghost/functions/{route}", json={"name": "ghost"})
        assert answer.status_code == 422, (route, answer.text)
        assert (
            answer.json()["error"]["code"] == "unknown_function" and answer.json()["error"]["field"] == "name"
        )
    assert (
        client.post("/v1/sessions/s-ghost/functions/activate", json={"name": "approval"}).status_code == 200
    )
    ended = client.post("/v1/sessions/s-ghost/functions/deactivate", json={"name": "approval"})
    assert ended.status_code == 200 and ended.json()["active"] == []


def test_an_empty_functions_list_writes_no_function_state_where_nothing_is_locked(
    client: TestClient, redis_client: Redis, keys: BucketKeys
) -> None:
    """``{"functions": [], "dmailEnabled": true}`` on a session without function state wrote one (counted toward
    the user's quota, so at the quota the whole settings PUT was refused)."""
    answer = client.put("/v1/sessions/s-empty", json={"functions": [], "dmailEnabled": True})
    assert answer.status_code == 200 and answer.json()["dmailEnabled"] is True
    assert redis_client.exists(keys.functions_state(session_scope("s-empty"))) == 0
