"""A user token's chain keeps its follow-ups in its user's own scopes (an audit): real Redis, a real worker, an
app with a bootstrap key; tenant ``acme``'s ingest key sends bob's events, alice sends hers with her token."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from producers.http.app import create_web_app
from tests.conftest import wait_for
from worker.keys.layout import Keys
from worker.settings import Settings

pytestmark = pytest.mark.integration

BOOT = "bootstrap-key-for-own-scope-followups-0123"
TENANT, ALICE, BOB, TOPIC = "acme", "alice", "bob", "grp_1"


def _bearer(credential: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {credential}"}


@pytest.fixture
def settings(make_settings: Any) -> Settings:
    made: Settings = make_settings(bootstrap_key=BOOT, auth_cache_s=0, rate_limit_per_s=0)
    return made


@pytest.fixture
def door(settings: Settings) -> Iterator[tuple[TestClient, dict[str, str]]]:
    """The door; credentials ``ingest`` and ``operate`` (tenant ``acme``'s keys) and ``alice`` (her user token)."""
    with TestClient(create_web_app(settings)) as client:
        creds: dict[str, str] = {}
        for role in ("ingest", "operate"):
            made = client.post("/v1/keys", json={"tenant": TENANT, "role": role}, headers=_bearer(BOOT))
            assert made.status_code == 201, made.text
            creds[role] = made.json()["key"]
        minted = client.post("/v1/tokens", json={"userId": ALICE}, headers=_bearer(creds["operate"]))
        assert minted.status_code == 200, minted.text
        creds[ALICE] = minted.json()["token"]
        yield client, creds


@pytest.fixture
def stack(
    door: tuple[TestClient, dict[str, str]], settings: Settings, start_worker: Any
) -> tuple[TestClient, dict[str, str]]:
    """The door and one worker."""
    start_worker(settings)
    return door


def _send(client: TestClient, credential: str, event: dict[str, Any]) -> str:
    answer = client.post("/v1/events", json=event, headers=_bearer(credential))
    assert answer.status_code == 202, answer.text
    return str(answer.json()["results"][0]["eventId"])


def _done(client: TestClient, read: str, event_id: str) -> dict[str, Any]:
    return dict(
        wait_for(
            lambda: (
                (r := client.get(f"/v1/events/{event_id}", headers=_bearer(read)).json()).get("status")
                in ("done", "dead")
                and r
            ),
            what=f"event {event_id}",
        )
    )


def _listed(client: TestClient, read: str, **query: str) -> list[dict[str, Any]]:
    answer = client.get("/v1/events", params=query, headers=_bearer(read))
    assert answer.status_code == 200, answer.text
    return list(answer.json()["events"])


def _failed_tool(source_id: str, timestamp: int) -> dict[str, Any]:
    return {
        "sourceType": "tool.outcome.failed",
        "sourceId": source_id,
        "agentId": "agt_1",
        "timestamp": timestamp,
        "payload": {
            "agentId": "agt_1",
            "topicId": TOPIC,
            "tool": {"identifier": "lobe-user-memory", "apiName": "addPreferenceMemory"},
            "outcome": {"status": "failed"},
            "domainKey": "memory:user-preference",
            "messageId": "msg_a1",
        },
    }


def test_a_user_tokens_follow_ups_and_their_runs_stay_in_its_users_own_scope(
    stack: tuple[TestClient, dict[str, str]], redis_client: Redis, prefix: str, scope_buckets: int
) -> None:
    """Alice's failed tool outcomes in bob's topic request self-reflection: the requests and the runs' completions
    run in ``user:alice/topic:grp_1`` beside her outcomes, never in bob's ``topic:grp_1`` (where they would skip
    its inbox caps and make alice one of its users, so bob's erasure would take it for a shared scope)."""
    client, creds = stack
    read = creds["operate"]
    # Given bob's message in topic grp_1 (an API key's event: the derived scope topic:grp_1)
    bobs = {
        "sourceType": "agent.user.message",
        "sourceId": "msg_b1",
        "userId": BOB,
        "agentId": "agt_1",
        "payload": {"agentId": "agt_1", "topicId": TOPIC, "messageId": "msg_b1", "message": "Hello there."},
    }
    assert _done(client, read, _send(client, creds["ingest"], bobs))["scopeKey"] == f"topic:{TOPIC}"
    # When alice's token sends two failed outcomes of one tool in that topic (two reasons cross their threshold)
    for n in (1, 2):
        outcome = _done(client, read, _send(client, creds[ALICE], _failed_tool(f"tool_a{n}", n * 1000)))
        assert (outcome["status"], outcome["scopeKey"]) == ("done", f"user:{ALICE}/topic:{TOPIC}")
    requests = wait_for(
        lambda: (
            len(r := _listed(client, read, userId=ALICE, sourceType="agent.self_reflection.requested")) == 2
            and r
        ),
        what="alice's two self-reflection requests",
    )
    completions = wait_for(
        lambda: (
            len(r := _listed(client, read, userId=ALICE, sourceType="agent.execution.completed")) == 2 and r
        ),
        what="the two self-reflection runs' completions",
    )
    # Then the requests and the runs' completions ran in alice's own scope
    own = f"user:{ALICE}/topic:{TOPIC}"
    assert [e["scopeKey"] for e in requests + completions] == [own] * 4
    for event in requests + completions:
        assert _done(client, read, event["eventId"])["status"] == "done"
    # and bob's topic holds bob's message alone, with bob its only user
    shared = _listed(client, read, scopeKey=f"topic:{TOPIC}")
    assert [(e["sourceType"], e["userId"]) for e in shared] == [("agent.user.message", BOB)]
    scope_users = Keys(prefix, buckets=scope_buckets).for_tenant(TENANT).for_scope(f"topic:{TOPIC}")
    assert redis_client.smembers(scope_users.scope_users(f"topic:{TOPIC}")) == {BOB}


def test_a_user_token_naming_its_own_placed_scope_runs_there(door: tuple[TestClient, dict[str, str]]) -> None:
    """The door keeps a token's events by the same rule: a scope under ``user:<id>/`` is the user's own (run there,
    not put under it twice), another is put under it."""
    client, creds = door
    for source_id, named, runs_in in (
        ("m1", f"user:{ALICE}/topic:{TOPIC}", f"user:{ALICE}/topic:{TOPIC}"),
        ("m2", f"topic:{TOPIC}", f"user:{ALICE}/topic:{TOPIC}"),
        ("m3", f"user:{BOB}", f"user:{ALICE}/user:{BOB}"),
    ):
        event = {"sourceType": "agent.user.message", "sourceId": source_id, "scopeKey": named, "payload": {}}
        event_id = _send(client, creds[ALICE], event)
        status = client.get(f"/v1/events/{event_id}", headers=_bearer(creds["operate"])).json()
        assert status["scopeKey"] == runs_in
