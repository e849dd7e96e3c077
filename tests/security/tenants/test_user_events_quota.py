"""One user's share of the tenant's retained events (``AGENT_SIGNAL_USER_MAX_EVENTS``).

A trust audit: one end user's token filled the tenant's whole retained-events quota (about 40 requests of
large events at the defaults), and every other user and key of the tenant was refused ``quota_exceeded`` for
a day (``Retry-After`` 87,738 s); erasing that user gave nothing back. Now the events naming a user count
toward a share of their own as well, checked in the same script (or, with scope buckets, summed at the door
first); past it only that user is refused, and erasing them starts their share again.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from tests.security.conftest import ClientFactory
from worker.core.errors import OverLimit
from worker.keys.layout import BucketKeys
from worker.ops.credentials import CredentialStore
from worker.settings import Settings

pytestmark = pytest.mark.integration

BOOT = "bootstrap-key-for-user-events-0123456789"
SECRET = "token-secret-for-the-user-events-tests-0123456789"


def bearer(credential: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {credential}"}


def _event(source_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "sourceType": "test.timeline",
        "sourceId": source_id,
        "scopeKey": f"topic:{source_id}",
        "payload": {},
        **extra,
    }


@pytest.mark.parametrize("buckets", [1, 4])
def test_a_user_past_their_share_is_refused_and_the_tenants_other_callers_are_not(
    app_client: ClientFactory, redis_client: Redis, keys: BucketKeys, buckets: int
) -> None:
    client: TestClient = app_client(
        bootstrap_key=BOOT,
        token_secret=SECRET,
        auth_cache_s=0,
        rate_limit_per_s=0,
        tenant_max_events=100,
        user_max_events=5,
        scope_buckets=buckets,
    )
    store = CredentialStore(redis_client, keys, token_secret=SECRET)
    record, operate = store.create("acme", "operate")
    alice, bob = (
        bearer(store.mint_user_token("acme", u, issuer_key_id=record.id)[0]) for u in ("alice", "bob")
    )

    def send(headers: dict[str, str], *source_ids: str) -> Any:
        return client.post("/v1/events", json={"events": [_event(s) for s in source_ids]}, headers=headers)

    assert send(alice, *[f"al{i}" for i in range(5)]).status_code == 202
    over = send(alice, "al5")
    assert over.status_code == 429, over.text
    error = over.json()["error"]
    assert error["code"] == "quota_exceeded" and "AGENT_SIGNAL_USER_MAX_EVENTS" in error["message"]
    assert "'alice'" in error["message"] and int(over.headers["retry-after"]) >= 1
    # a retry of a stored event stores nothing: still answered
    again = send(alice, "al4")
    assert again.status_code == 202 and again.json()["results"][0]["status"] == "duplicate"
    # the tenant's other users, and its key's events of no user, are not held by alice's share
    assert send(bob, *[f"bo{i}" for i in range(5)]).status_code == 202
    assert send(bearer(operate), *[f"op{i}" for i in range(10)]).status_code == 202
    # a key's events naming alice count toward her share too
    named = client.post("/v1/events", json=_event("op-alice", userId="alice"), headers=bearer(operate))
    assert named.status_code == 429 and "AGENT_SIGNAL_USER_MAX_EVENTS" in named.text
    # erasing alice starts her share again (her tokens issued before it are refused: the app mints a new one)
    erased = client.delete("/v1/users/alice", headers=bearer(operate))
    assert erased.status_code == 200, erased.text
    assert send(alice, "al-after").status_code == 401
    minted = client.post("/v1/tokens", json={"userId": "alice"}, headers=bearer(operate))
    alice = bearer(minted.json()["token"])
    assert send(alice, "al-after").status_code == 202


def test_the_refusal_names_the_user_and_the_setting() -> None:
    settings = Settings(user_max_events=7)
    refusal = OverLimit.from_reply("OVERLIMIT userevents 2 7 3600", settings, ["alice", "bob"])
    assert refusal.what == "user_events" and refusal.retry_after_s == 3600 and refusal.field == "userId"
    assert "'bob'" in refusal.message and "AGENT_SIGNAL_USER_MAX_EVENTS" in refusal.message


@pytest.mark.parametrize("buckets", [1, 4])
def test_a_first_batch_over_the_share_is_refused_as_too_large_not_taken(
    app_client: ClientFactory, redis_client: Redis, keys: BucketKeys, buckets: int
) -> None:
    """A review: with nothing counted yet (a new user, or one just erased) any batch passed the share, and the
    tenant's quota alike. Now it is refused, saying waiting will not help; a batch within it goes in."""
    client: TestClient = app_client(
        bootstrap_key=BOOT,
        token_secret=SECRET,
        auth_cache_s=0,
        rate_limit_per_s=0,
        tenant_max_events=8,
        user_max_events=5,
        scope_buckets=buckets,
    )
    store = CredentialStore(redis_client, keys, token_secret=SECRET)
    record, operate = store.create("acme", "operate")
    carol = bearer(store.mint_user_token("acme", "carol", issuer_key_id=record.id)[0])

    def send(headers: dict[str, str], prefix: str, count: int) -> Any:
        events = [_event(f"{prefix}{i}") for i in range(count)]
        return client.post("/v1/events", json={"events": events}, headers=headers)

    over = send(carol, "c", 6)
    assert over.status_code == 429, over.text
    message = over.json()["error"]["message"]
    assert "AGENT_SIGNAL_USER_MAX_EVENTS" in message and "this request alone is over it" in message
    tenant_over = send(bearer(operate), "t", 9)
    assert tenant_over.status_code == 429 and "AGENT_SIGNAL_TENANT_MAX_EVENTS" in tenant_over.text
    assert "this request alone is over it" in tenant_over.text
    assert send(carol, "c", 5).status_code == 202
    # with some counted now, a batch that is over the quota on its own is still told waiting will not help
    alone = send(bearer(operate), "u", 9)
    assert alone.status_code == 429 and "this request alone is over it" in alone.text
    assert "retry-after" not in alone.headers
