"""The security walk: every route the app registers (read from its route table, so a new route without a
check fails here) is called with (a) no credential, (b) a key of another tenant, (c) a user token of another
user, (d) a key lacking the route's grant. Answers must be 401 / 404 / 403 as the contract says, no answer
may carry a byte of tenant A's user's data, and A's data must be intact afterwards.

One world per run: a real worker makes tenant A's memories, skills, receipts and chains; a session holds
context. The routes' grants are read from their dependencies' ``__agent_signal_grant__`` markers."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from starlette.routing import BaseRoute, Route

from producers.http.app import create_web_app
from tests.conftest import wait_for
from tests.support.routes import flat_routes

pytestmark = pytest.mark.integration

BOOT = "bootstrap-key-for-the-walk-0123456789"
TENANT_A, TENANT_B = "tenant-a", "tenant-b"
USER, OTHER = "ua-walk-1", "ua-walk-2"
AGENT, TOPIC, SESSION = "agt_w", "tpc-walk", "sess-walk-1"
SECRETS = ("kestrel-memory-8d1", "heron-skill-4c7", "ua1-context-9b2")  # A's user's content

# A value for every path parameter a route may declare; a route with another name fails the walk.
GRANT_LACKING_ROLE = {
    "read": "ingest",
    "ingest": "read",
    "operate": "read",
    "admin": "operate",
    "ops": "ingest",
}


def _bearer(credential: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {credential}"}


@dataclass
class World:
    client: TestClient
    keys: dict[str, str]  # "<tenant>:<role>" -> secret
    tokens: dict[str, str]  # user -> user token (tenant A)
    path_values: dict[str, str] = field(default_factory=dict)

    def auth(self, name: str) -> dict[str, str]:
        return _bearer(self.keys[name] if ":" in name else self.tokens[name])


def _make_key(client: TestClient, tenant: str, role: str) -> tuple[str, str]:
    answer = client.post("/v1/keys", json={"tenant": tenant, "role": role}, headers=_bearer(BOOT))
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"]), str(answer.json()["key"])


def _message(source_id: str, text: str) -> dict[str, Any]:
    return {
        "sourceType": "agent.user.message",
        "sourceId": source_id,
        "userId": USER,
        "agentId": AGENT,
        "payload": {"agentId": AGENT, "topicId": TOPIC, "messageId": source_id, "message": text},
    }


@pytest.fixture
def world(make_settings: Any, start_worker: Any) -> Iterator[World]:
    settings = make_settings(bootstrap_key=BOOT, auth_cache_s=0, rate_limit_per_s=0, ops_open="never")
    start_worker(settings)
    with TestClient(create_web_app(settings)) as client:
        keys: dict[str, str] = {}
        key_ids: dict[str, str] = {}
        for tenant in (TENANT_A, TENANT_B):
            for role in ("ingest", "read", "operate", "admin"):
                key_ids[f"{tenant}:{role}"], keys[f"{tenant}:{role}"] = _make_key(client, tenant, role)
        operate = _bearer(keys[f"{TENANT_A}:operate"])
        tokens = {
            user: client.post("/v1/tokens", json={"userId": user}, headers=operate).json()["token"]
            for user in (USER, OTHER)
        }
        yield _populate(World(client, keys, tokens), key_ids)


def _populate(world: World, key_ids: dict[str, str]) -> World:
    client, ingest = world.client, world.auth(f"{TENANT_A}:ingest")
    sent = []
    for source_id, text in (
        ("w-m1", f"Going forward, I prefer {SECRETS[0]} answers."),
        ("w-s1", f'Please create a skill called "{SECRETS[1]}": run the tests, tag.'),
    ):
        answer = client.post("/v1/events", json=_message(source_id, text), headers=ingest)
        assert answer.status_code == 202, answer.text
        sent.append(answer.json()["results"][0]["eventId"])
    operate = world.auth(f"{TENANT_A}:operate")
    assert client.put(f"/v1/sessions/{SESSION}", json={"userId": USER}, headers=operate).status_code == 200
    body = {"messages": [{"role": "user", "content": SECRETS[2]}]}
    assert (
        client.post(f"/v1/sessions/{SESSION}/context/messages", json=body, headers=operate).status_code == 200
    )
    read = world.auth(f"{TENANT_A}:read")
    owner = {"userId": USER, "agentId": AGENT, "topicId": TOPIC}

    def ready() -> Any:
        receipts = client.get("/v1/receipts", params=owner, headers=read).json()["receipts"]
        memories = client.get("/v1/memories", params={"userId": USER}, headers=read).json()["memories"]
        skills = [r for r in receipts if r["kind"] == "skill"]
        return skills and memories and (receipts, memories, skills)

    _, memories, skills = wait_for(ready, timeout_s=90, what="tenant A's receipts")
    world.path_values = {
        "event_id": sent[0],
        "chain_id": "chain:w-m1",
        "receipt_id": skills[0]["id"],
        "memory_id": memories[0]["id"],
        "document_id": skills[0]["metadata"]["documentId"],
        "session_id": SESSION,
        "user_id": USER,
        "key_id": key_ids[f"{TENANT_A}:read"],
        "name": "notes",
        "scope_key": f"topic:{TOPIC}",
        "tenant": TENANT_A,  # DELETE /v1/tenants/{tenant}: root only, so every caller here is refused
    }
    return world


def _grant(route: BaseRoute) -> tuple[str | None, bool]:
    """The route's declared grant and whether user tokens may call it (None: nothing declared)."""
    if not isinstance(route, APIRoute):
        return "ops", False  # FastAPI's own /docs, /redoc, /openapi.json: the middleware's ops surfaces
    stack = list(route.dependant.dependencies)
    while stack:
        dep = stack.pop()
        grant = getattr(dep.call, "__agent_signal_grant__", None)
        if grant is not None:
            return str(grant), bool(getattr(dep.call, "__agent_signal_users__", False))
        stack += dep.dependencies
    return None, False


def _names_user(route: BaseRoute) -> bool:
    """Whether the route addresses one user: a ``userId`` query parameter, or a user or session in its path."""
    if not isinstance(route, APIRoute):
        return False
    query = {p.alias for p in route.dependant.query_params}
    return "userId" in query or "{user_id}" in route.path or "{session_id}" in route.path


def _calls(world: World) -> Iterator[tuple[str, str, str, str | None, bool, bool]]:
    """(method, url, route path, grant, users, names a user) for every route, parameters filled in."""
    query = f"?userId={USER}&agentId={AGENT}&topicId={TOPIC}"
    for route in flat_routes(world.client.app.routes):  # type: ignore[attr-defined]
        if not isinstance(route, Route):
            continue
        grant, users = _grant(route)
        url = route.path
        for name in re.findall(r"{([a-zA-Z_]+)(?::path)?}", route.path):
            assert name in world.path_values, f"{route.path}: the walk has no value for {{{name}}}; add one"
            url = re.sub("{" + name + "(?::path)?}", world.path_values[name], url)
        for method in sorted(route.methods or {"GET"}):
            if method != "HEAD":
                yield method, url + query, route.path, grant, users, _names_user(route)


def _call(world: World, method: str, url: str, headers: dict[str, str]) -> tuple[int, str]:
    """The status and the body (the first bytes only, for a stream that stays open)."""
    if url.startswith("/v1/receipts/stream"):
        with world.client.stream(method, url, headers=headers) as response:
            if response.status_code != 200:
                return response.status_code, response.read().decode(errors="replace")
            return 200, next(response.iter_text(), "")
    kwargs: dict[str, Any] = {"headers": headers}
    if method in ("POST", "PUT", "PATCH"):
        kwargs["json"] = {}
    response = world.client.request(method, url, **kwargs)
    return response.status_code, response.text


def _leaks(body: str) -> list[str]:
    return [secret for secret in SECRETS if secret in body]


def test_every_route_holds_against_every_wrong_caller(world: World) -> None:
    offenders: list[str] = []
    calls = list(_calls(world))
    assert len(calls) > 40, "the walk found too few routes: is the route table read correctly?"
    for method, url, path, grant, users, names_user in calls:
        where = f"{method} {path}"
        if grant is None:
            offenders.append(f"{where}: declares no grant (require/public/ops_access/session guard)")
            continue
        if grant == "public":
            _, body = _call(world, method, url, {})
            offenders += [f"{where} (public): leaks {s}" for s in _leaks(body)]
            continue
        offenders += _check(world, where, method, url, grant, users and names_user, users)
    assert offenders == [], "\n".join(offenders)
    _assert_a_intact(world)


def _check(
    world: World, where: str, method: str, url: str, grant: str, names_user: bool, users: bool
) -> list[str]:
    out: list[str] = []
    ids = ("event_id", "chain_id", "receipt_id", "memory_id", "document_id", "key_id")
    a_resource = any(re.search("{" + n + "(:path)?}", where) for n in ids)  # one of A's things, by id
    cases = {
        "(a) no credential": ({}, {401}),
        "(b) another tenant": (world.auth(f"{TENANT_B}:admin"), {404} if a_resource else None),
        "(c) another user's token": (world.auth(OTHER), _user_case(grant, users, names_user)),
        "(d) lacking the grant": (_lacking(world, grant, method), {403}),
    }
    for case, (headers, expected) in cases.items():
        status, body = _call(world, method, url, headers)
        if expected is not None and status not in expected:
            out.append(f"{where} {case}: {status}, expected {sorted(expected)}: {body[:160]}")
        out += [f"{where} {case}: leaks {secret!r}" for secret in _leaks(body)]
    return out


def _user_case(grant: str, users: bool, names_user: bool) -> set[int] | None:
    """A route closed to user tokens: 403. One that addresses A's user (by userId, path or session): 404.
    Else (its own events, its own conversations) any answer, as long as nothing of A's user is in it."""
    if not users or grant in ("admin", "ops"):
        return {403}
    return {404} if names_user else None


def _lacking(world: World, grant: str, method: str) -> dict[str, str]:
    if grant == "session":
        grant = "read" if method == "GET" else "operate"
    return world.auth(f"{TENANT_A}:{GRANT_LACKING_ROLE[grant]}")


def _assert_a_intact(world: World) -> None:
    """Nothing the wrong callers did changed tenant A's user's data or A's keys."""
    client, read = world.client, world.auth(f"{TENANT_A}:read")
    memories = client.get("/v1/memories", params={"userId": USER}, headers=read).json()["memories"]
    assert any(SECRETS[0] in str(m) for m in memories)
    context = client.get(f"/v1/sessions/{SESSION}/context", headers=read).json()
    assert any(SECRETS[2] in str(m) for m in context["messages"])
    skill = client.get(
        f"/v1/skills/{world.path_values['document_id']}",
        params={"userId": USER, "agentId": AGENT},
        headers=read,
    )
    assert skill.status_code == 200 and SECRETS[1] in skill.text
