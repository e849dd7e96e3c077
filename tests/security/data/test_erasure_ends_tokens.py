"""Erasing a user ends the user's tokens, and nothing else the user could use to start over (a real ``agent-signal
web`` and worker, over HTTP).

An audit: a user token may erase its own user, and it stayed valid afterwards, so one end user looped "send my
share, erase myself, send again" (the erasure started their share of the tenant's retained events again, while the
tenant's count kept the events as tombstones) until the tenant's ``AGENT_SIGNAL_TENANT_MAX_EVENTS`` was full and
every other user of the tenant was refused 429 ``quota_exceeded``; the erasure also deleted the token's rate
bucket, so "erase myself, then read" escaped ``AGENT_SIGNAL_RATE_LIMIT_PER_S``. Now a token of the user issued
before the erasure is refused afterwards (401, saying the user was erased; the app mints a new one, which works),
and an erasure leaves the rate buckets alone.

A review then found the tokens ended only once the erasure was done: the erasing token kept writing while it ran
(behind the erasure), and a Redis error in ending them left the erasure done and the token alive. They now end as
the erasure starts (an erasure held at a gate, tests/plugins/erasure_gate.py, shows it), and an erasure refused 429 because another
of the tenant runs ends no token."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from redis import Redis

from tests.conftest import wait_for
from tests.plugins.erasure_gate import PLUGIN as GATE_PLUGIN
from tests.plugins.erasure_gate import gate_keys
from worker.keys.layout import Keys

pytestmark = pytest.mark.integration

BOOT = "bootstrap-key-for-erasure-ends-tokens-0123456789"
READ_TIMEOUT_S = 10.0  # under the 15 s keep-alive: a stream that does not end times out


def _bearer(credential: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {credential}"}


@dataclass
class Door:
    """A web process with the bootstrap key, a client, and an operate key of each of two tenants."""

    http: httpx.Client
    keys: dict[str, dict[str, Any]]

    def token(self, user: str, tenant: str = "acme") -> dict[str, str]:
        minted = self.http.post("/v1/tokens", json={"userId": user}, headers=self.operator(tenant))
        assert minted.status_code == 200, minted.text
        return _bearer(minted.json()["token"])

    def operator(self, tenant: str = "acme") -> dict[str, str]:
        return _bearer(self.keys[tenant]["key"])

    def send(self, headers: dict[str, str], *source_ids: str) -> httpx.Response:
        events = [
            {"sourceType": "test.timeline", "sourceId": s, "scopeKey": f"topic:{s}", "payload": {}}
            for s in source_ids
        ]
        return self.http.post("/v1/events", json={"events": events}, headers=headers)


def _door(url: str) -> Iterator[Door]:
    with httpx.Client(base_url=url, timeout=httpx.Timeout(30, read=READ_TIMEOUT_S)) as http:
        keys = {}
        for tenant in ("acme", "beta"):
            made = http.post("/v1/keys", json={"tenant": tenant, "role": "operate"}, headers=_bearer(BOOT))
            assert made.status_code == 201, made.text
            keys[tenant] = made.json()
        yield Door(http, keys)


@pytest.fixture
def door(make_settings: Any, start_worker: Any, serve_web: Any) -> Iterator[Door]:
    """The audit's quotas: 20 retained events per tenant, 5 per user; no per-credential rate."""
    settings = make_settings(bootstrap_key=BOOT, tenant_max_events=20, user_max_events=5, rate_limit_per_s=0)
    start_worker(settings)
    _, url = serve_web(settings)
    yield from _door(url)


@pytest.fixture
def gated_door(make_settings: Any, serve_web: Any) -> Iterator[Door]:
    """The web app (served over HTTP) whose erasures of ``slow-…`` users wait at the gate (tests/plugins/erasure_gate.py) until
    the test lets them go."""
    plugins = ["tests.support.policies:bundle", GATE_PLUGIN]
    _, url = serve_web(make_settings(bootstrap_key=BOOT, rate_limit_per_s=0, plugins=plugins))
    yield from _door(url)


@contextmanager
def _held_erasure(
    door: Door, redis_client: Redis, prefix: str, user: str
) -> Iterator[Future[httpx.Response]]:
    """The operator's erasure of ``user`` (a ``slow-…`` one) started and waiting at the gate; let go on exit."""
    waiting, go = gate_keys(Keys(prefix).for_tenant("acme"), user)
    with ThreadPoolExecutor(max_workers=1) as pool:
        erasure = pool.submit(door.http.delete, f"/v1/users/{user}", headers=door.operator())
        try:
            wait_for(lambda: redis_client.exists(waiting) or erasure.done(), what="the erasure at the gate")
            assert not erasure.done(), erasure.result().text
            yield erasure
        finally:
            redis_client.rpush(go, "go")
        assert erasure.result().status_code == 200, erasure.result().text


@pytest.fixture
def rated_door(make_settings: Any, serve_web: Any) -> Iterator[Door]:
    """The audit's rate: 3 requests a second per credential."""
    _, url = serve_web(make_settings(bootstrap_key=BOOT, rate_limit_per_s=3))
    yield from _door(url)


def _refused_as_erased(response: httpx.Response) -> None:
    """401 in the shape of any credential that does not verify, its message saying the user was erased."""
    assert response.status_code == 401, response.text
    assert response.headers["www-authenticate"] == "Bearer"
    error = response.json()["error"]
    assert error["code"] == "unauthorized" and "erased" in error["message"], error


def test_a_token_that_erased_its_own_user_cannot_loop_to_fill_the_tenant(door: Door) -> None:
    """The audit's loop (tenant 20 events, user 5): a full share, a self-erasure, and the next round's send is
    refused 401; the tenant keeps room for its other users."""
    alice = door.token("alice")
    assert door.send(alice, *[f"al-1-{i}" for i in range(5)]).status_code == 202
    over = door.send(alice, "al-1-5")
    assert over.status_code == 429 and over.json()["error"]["code"] == "quota_exceeded", over.text

    erased = door.http.delete("/v1/users/alice", headers=alice)
    assert erased.status_code == 200 and erased.json()["userId"] == "alice", erased.text

    _refused_as_erased(door.send(alice, *[f"al-2-{i}" for i in range(5)]))  # round 2: the loop ends here
    _refused_as_erased(door.http.delete("/v1/users/alice", headers=alice))
    bob = door.token("bob")
    assert door.send(bob, *[f"bo-{i}" for i in range(5)]).status_code == 202
    assert door.send(door.operator(), *[f"op-{i}" for i in range(5)]).status_code == 202


def test_a_token_minted_after_the_erasure_works_and_an_older_one_does_not(door: Door) -> None:
    """After an operator's erasure the user's old token is refused, a token minted since reads and sends (their
    share started again), and the same user id of another tenant was never touched."""
    old, elsewhere = door.token("alice"), door.token("alice", "beta")
    assert door.send(old, *[f"al-{i}" for i in range(5)]).status_code == 202

    erased = door.http.delete("/v1/users/alice", headers=door.operator())
    assert erased.status_code == 200, erased.text

    _refused_as_erased(door.http.get("/v1/receipts", headers=old))
    new = door.token("alice")
    assert door.http.get("/v1/receipts", headers=new).status_code == 200
    assert door.send(new, *[f"al-again-{i}" for i in range(5)]).status_code == 202
    assert door.http.get("/v1/receipts", headers=elsewhere).status_code == 200
    assert door.send(elsewhere, "beta-1").status_code == 202


def test_a_stream_of_a_token_that_erases_its_own_user_ends_with_user_erased(door: Door) -> None:
    """The self-erasure ends the token's own open stream after ``: user erased``; the token opens no new one."""
    alice = door.token("alice")
    lines: list[str] = []
    with door.http.stream("GET", "/v1/receipts/stream", headers=alice) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line:
                lines.append(line)
            if line == ": connected":
                erased = door.http.delete("/v1/users/alice", headers=alice)
                assert erased.status_code == 200, erased.text
    assert lines == [": connected", ": user erased"]
    _refused_as_erased(door.http.get("/v1/receipts/stream", headers=alice))


def test_an_erasure_leaves_the_users_rate_bucket_alone(
    rated_door: Door, redis_client: Redis, prefix: str
) -> None:
    """A user token's bucket (``ratelimit:{acme}:<issuer>:alice``) is the same before and after the user's
    erasure: an erasure never resets a rate (it took the bucket, and a self-erasure reset the token's rate)."""
    door = rated_door
    alice = door.token("alice")
    assert door.http.get("/v1/receipts", headers=alice).status_code == 200
    bucket = Keys(prefix).for_tenant("acme").rate_bucket(f"{door.keys['acme']['id']}:alice")
    # kept from expiring while the erasure runs (an idle bucket expires in ~1.3 s at this rate, which would read
    # as the erasure's deletion on a loaded machine): only a deletion empties it now
    assert redis_client.persist(bucket), "the test must start with the user's bucket charged"
    before = redis_client.hgetall(bucket)

    erased = door.http.delete("/v1/users/alice", headers=door.operator())
    assert erased.status_code == 200, erased.text
    assert redis_client.hgetall(bucket) == before


def test_the_users_old_tokens_and_streams_end_as_the_erasure_starts(
    gated_door: Door, redis_client: Redis, prefix: str
) -> None:
    """While the erasure waits at the gate: the user's stream opened before it has ended with ``: user erased``
    and the user's old token is refused (it wrote behind the erasure until it was done); a token minted since the
    erasure started works, during it and after it."""
    door = gated_door
    old = door.token("slow-1")
    with door.http.stream("GET", "/v1/receipts/stream", headers=old) as stream:
        assert stream.status_code == 200, stream.read()
        lines = stream.iter_lines()
        assert next(lines) == ": connected"
        with _held_erasure(door, redis_client, prefix, "slow-1"):
            assert [line for line in lines if line] == [": user erased"]
            _refused_as_erased(door.send(old, "behind-the-erasure"))
            minted_meanwhile = door.token("slow-1")
            assert door.http.get("/v1/receipts", headers=minted_meanwhile).status_code == 200
    _refused_as_erased(door.http.get("/v1/receipts", headers=old))
    assert door.http.get("/v1/receipts", headers=minted_meanwhile).status_code == 200


def test_an_erasure_refused_while_another_of_the_tenant_runs_ends_no_token(
    gated_door: Door, redis_client: Redis, prefix: str
) -> None:
    """A self-erasure answered 429 (another erasure of the tenant runs) leaves the asking token valid; once the
    other is done, the same token's erasure runs and ends it."""
    door = gated_door
    bob = door.token("bob")
    with _held_erasure(door, redis_client, prefix, "slow-1"):
        refused = door.http.delete("/v1/users/bob", headers=bob)
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limited", refused.text
        assert int(refused.headers["retry-after"]) >= 1
        assert door.http.get("/v1/receipts", headers=bob).status_code == 200
    assert door.http.delete("/v1/users/bob", headers=bob).status_code == 200
    _refused_as_erased(door.http.get("/v1/receipts", headers=bob))
