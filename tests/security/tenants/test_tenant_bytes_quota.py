"""The tenant's stored bytes (``AGENT_SIGNAL_TENANT_MAX_BYTES``): an audit found the storage quota counted per
user only. A tenant that minted tokens for many users could store ``AGENT_SIGNAL_USER_MAX_BYTES`` for each of
them, and sessions that name no user counted toward nothing (8 MiB each, in any number of sessions). Every byte
counted for a user now counts for its tenant too, and so does what a session of no user stores; past the
tenant's quota the door answers 429 ``quota_exceeded`` to every writer of that tenant, and no other tenant."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from tests.security.conftest import ClientFactory
from worker.keys.layout import BucketKeys
from worker.ops.credentials import CredentialStore
from worker.store.quotas import add_user_bytes, migrate_tenant_bytes, user_bytes_effects

pytestmark = pytest.mark.integration

BOOT = "bootstrap-key-for-tests-0123456789"
SECRET = "token-secret-for-the-tenant-bytes-tests-0123456789"
MESSAGE = {"messages": [{"role": "user", "content": "x" * 450}]}


def bearer(credential: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {credential}"}


def _event(source_id: str) -> dict[str, Any]:
    return {
        "sourceType": "test.timeline",
        "sourceId": source_id,
        "scopeKey": f"topic:{source_id}",
        "payload": {},
    }


def _total(redis_client: Redis, key: str) -> int:
    return sum(int(n) for n in redis_client.hgetall(key).values())


class Door:
    """An app with a 2,000-byte user quota and a 2,500-byte tenant quota; acme's operate key and user tokens,
    and another tenant's operate key."""

    def __init__(
        self, app_client: ClientFactory, redis_client: Redis, keys: BucketKeys, **settings: Any
    ) -> None:
        self.client: TestClient = app_client(
            bootstrap_key=BOOT,
            token_secret=SECRET,
            auth_cache_s=0,
            user_max_bytes=2000,
            tenant_max_bytes=2500,
            rate_limit_per_s=0,
            **settings,
        )
        store = CredentialStore(redis_client, keys, token_secret=SECRET)
        record, secret = store.create("acme", "operate")
        self.operator = bearer(secret)
        self.other_tenant = bearer(store.create("beta", "operate")[1])
        self.users = {
            u: bearer(store.mint_user_token("acme", u, issuer_key_id=record.id)[0])
            for u in ("alice", "bob", "carol")
        }
        self.redis, self.keys = redis_client, keys.for_tenant("acme")

    def write(self, session: str, headers: dict[str, str]) -> Any:
        return self.client.post(f"/v1/sessions/{session}/context/messages", json=MESSAGE, headers=headers)

    @property
    def tenant_bytes(self) -> int:
        return _total(self.redis, self.keys.tenant_bytes)

    def user_bytes(self, user: str) -> int:
        return _total(self.redis, self.keys.user_bytes(user))


def _refused_for_the_tenant(answer: Any) -> None:
    assert answer.status_code == 429, answer.text
    error = answer.json()["error"]
    assert error["code"] == "quota_exceeded" and "AGENT_SIGNAL_TENANT_MAX_BYTES" in error["message"], error
    assert error.get("field") is None  # no field of the request is to blame
    assert int(answer.headers["retry-after"]) >= 1  # session context expires with its session


@pytest.mark.buckets
def test_users_under_their_own_quota_are_held_to_the_tenants_together(
    app_client: ClientFactory, redis_client: Redis, keys: BucketKeys, scope_buckets: int
) -> None:
    """alice and bob each stay under the 2,000-byte user quota, but together pass the tenant's 2,500: then every
    writer of acme is refused (carol, who stores nothing, and the operator), nothing stored, while tenant beta
    writes. Erasing alice takes exactly her bytes out of the tenant's count, and acme writes again. With scope
    buckets the door reads the tenant's count before the buckets' scripts; with one, the enqueue script does."""
    door = Door(app_client, redis_client, keys, scope_buckets=scope_buckets)
    for user, session in (("alice", "s-a"), ("bob", "s-b")):
        assert (
            door.client.put(f"/v1/sessions/{session}", json={}, headers=door.users[user]).status_code == 200
        )
    for _ in range(3):
        assert door.write("s-a", door.users["alice"]).status_code == 200
    written = [door.write("s-b", door.users["bob"]) for _ in range(4)]
    assert written[0].status_code == 200  # (each new session counts 320 B too: SESSION_BYTES)
    refused = next(w for w in written if w.status_code != 200)
    _refused_for_the_tenant(refused)
    alice, bob = door.user_bytes("alice"), door.user_bytes("bob")
    assert alice < 2000 and bob < 2000, (alice, bob)  # no user is at their own quota
    assert door.tenant_bytes == alice + bob >= 2500
    stored = door.client.get("/v1/sessions/s-b/context", headers=door.users["bob"]).json()["messages"]
    assert len(stored) == sum(w.status_code == 200 for w in written)  # the refused writes stored nothing

    _refused_for_the_tenant(
        door.client.post("/v1/events", json=_event("carol-1"), headers=door.users["carol"])
    )
    _refused_for_the_tenant(door.client.post("/v1/events", json=_event("op-1"), headers=door.operator))
    assert door.client.post("/v1/events", json=_event("beta-1"), headers=door.other_tenant).status_code == 202
    assert door.client.put("/v1/sessions/s-beta", json={}, headers=door.other_tenant).status_code == 200
    assert door.write("s-beta", door.other_tenant).status_code == 200

    erased = door.client.delete("/v1/users/alice", headers=door.operator)
    assert erased.status_code == 200, erased.text
    assert door.tenant_bytes == bob
    assert (
        door.client.post("/v1/events", json=_event("carol-2"), headers=door.users["carol"]).status_code == 202
    )


def test_sessions_of_no_user_count_toward_the_tenant(
    app_client: ClientFactory, redis_client: Redis, keys: BucketKeys
) -> None:
    """A session that names no user stored up to its own cap in any number of sessions, counted nowhere. Its
    context, its function state and a pending D-Mail (taken back at step end) count for the tenant now, and at
    the tenant's quota a write that grows any of them is refused, nothing stored."""
    door = Door(app_client, redis_client, keys)
    op = door.operator
    assert door.client.put("/v1/sessions/s-1", json={"dmailEnabled": True}, headers=op).status_code == 200
    assert door.write("s-1", op).status_code == 200
    after_context = door.tenant_bytes
    assert after_context > 450
    artifact = door.client.put("/v1/sessions/s-1/artifacts/a1", json={"content": "y" * 500}, headers=op)
    assert artifact.status_code == 200, artifact.text
    after_state = door.tenant_bytes
    assert after_state >= after_context + 500
    assert door.client.post("/v1/sessions/s-1/context/checkpoint", json={}, headers=op).status_code == 200
    before_mail = door.tenant_bytes
    mail = door.client.post(
        "/v1/sessions/s-1/dmail", json={"message": "m" * 300, "checkpoint_id": 0}, headers=op
    )
    assert mail.status_code == 200 and mail.json()["isError"] is False, mail.text
    assert door.tenant_bytes >= before_mail + 300
    ended = door.client.post("/v1/sessions/s-1/steps/end", json={"rejectedWithoutFeedback": True}, headers=op)
    assert ended.json() == {"outcome": "discarded"}
    assert door.tenant_bytes == before_mail  # the discarded mail no longer counts

    for session in ("s-2", "s-3", "s-4"):
        assert door.client.put(f"/v1/sessions/{session}", json={}, headers=op).status_code == 200
        door.write(session, op)
    assert door.tenant_bytes >= 2500
    _refused_for_the_tenant(door.write("s-1", op))
    grown = door.client.put("/v1/sessions/s-1/artifacts/a2", json={"content": "z" * 10}, headers=op)
    assert grown.status_code == 429 and "AGENT_SIGNAL_TENANT_MAX_BYTES" in grown.json()["error"]["message"]
    assert "a2" not in door.client.get("/v1/sessions/s-1/artifacts", headers=op).text


def test_staged_counts_of_a_user_count_for_the_tenant_and_data_of_no_user_for_the_tenant_alone(
    keys: BucketKeys,
) -> None:
    """What a handler stages for a user's data (user_bytes_effects: receipts, conversations) counts for the user
    and the tenant; data that names no user (a receipt of no user) for the tenant alone."""
    day_field = user_bytes_effects(keys, "u1", 10, ttl_s=3600)[0][2]
    assert user_bytes_effects(keys, "u1", 10, ttl_s=3600) == [
        ["HINCRBY", keys.user_bytes("u1"), day_field, 10],
        ["HINCRBY", keys.tenant_bytes, day_field, 10],
    ]
    assert user_bytes_effects(keys, None, -4) == [["HINCRBY", keys.tenant_bytes, "keep", -4]]
    assert user_bytes_effects(keys, "u1", 0) == []


def test_migrate_raises_the_tenants_count_to_its_users_without_counting_twice(
    redis_client: Redis, keys: BucketKeys
) -> None:
    """``agent-signal migrate bytes``: a tenant's count is raised, day by day, to at least the sum of its users'
    counts (an earlier release kept those alone); what the users stored since the upgrade is in both already and
    is not added again, so a second run changes nothing. A dry run counts and changes nothing."""
    acme = keys.for_tenant("acme")
    redis_client.hset(acme.user_bytes("u1"), mapping={"keep": 100, "d30000": 7})
    redis_client.hset(acme.user_bytes("u2"), mapping={"keep": 20})
    # since the upgrade: u1 wrote 30 kept bytes (counted in both), a session of no user 9 bytes of day 30000
    redis_client.hincrby(acme.user_bytes("u1"), "keep", 30)
    redis_client.hset(acme.tenant_bytes, mapping={"keep": 30, "d30000": 9})
    assert migrate_tenant_bytes(redis_client, acme, dry_run=True) == 120
    assert redis_client.hgetall(acme.tenant_bytes) == {"keep": "30", "d30000": "9"}
    assert migrate_tenant_bytes(redis_client, acme) == 120
    assert redis_client.hgetall(acme.tenant_bytes) == {"keep": "150", "d30000": "9"}
    assert migrate_tenant_bytes(redis_client, acme) == 0
    add_user_bytes(redis_client, acme, "u2", 5)  # counted in both: a later run still adds nothing
    assert migrate_tenant_bytes(redis_client, acme) == 0
    assert redis_client.hgetall(acme.tenant_bytes) == {"keep": "155", "d30000": "9"}


def test_a_tenant_refusal_is_told_apart_from_a_users_with_the_user_quota_off(make_settings: Any) -> None:
    """``OVERLIMIT user 1 …`` is the first user's count when the user quota is on, the tenant's when it is off
    (the checks then hold the tenant's alone), and the tenant's past the users'."""
    from worker.core.errors import OverLimit

    on, off = make_settings(user_max_bytes=10), make_settings(user_max_bytes=0)
    assert OverLimit.from_reply("OVERLIMIT user 1 12 0", on, ["alice"]).what == "user_bytes"
    assert OverLimit.from_reply("OVERLIMIT user 2 12 0", on, ["alice"]).what == "tenant_bytes"
    refused = OverLimit.from_reply("OVERLIMIT user 1 12 5", off, ["alice"])
    assert (refused.what, refused.field, refused.retry_after_s) == ("tenant_bytes", None, 5)
    assert "AGENT_SIGNAL_TENANT_MAX_BYTES" in refused.message and "alice" not in refused.message


def test_erasing_a_user_counted_before_the_tenant_leaves_no_negative_count(
    redis_client: Redis, keys: BucketKeys
) -> None:
    """A user whose bytes were stored before the tenant's count existed (never migrated): erasing them takes each
    day's count down to zero at most, so the tenant's count never goes negative and hides what others store."""
    from worker.store.calls import ForgetUserBytes
    from worker.store.scripts import Scripts

    acme = keys.for_tenant("acme")
    redis_client.hset(acme.user_bytes("old"), mapping={"keep": 900, "d30000": 50})
    redis_client.hset(acme.tenant_bytes, mapping={"keep": 300, "d30000": 80})
    held = Scripts(redis_client).run(ForgetUserBytes(acme.user_bytes("old"), acme.tenant_bytes, sessions=()))
    assert int(held) == 950
    assert redis_client.hgetall(acme.tenant_bytes) == {"d30000": "30"}
    assert redis_client.exists(acme.user_bytes("old")) == 0


def test_a_pending_dmail_is_taken_back_from_the_tenant_with_its_user_and_only_once(
    app_client: ClientFactory, redis_client: Redis, keys: BucketKeys
) -> None:
    """A D-Mail counted for alice and the tenant is taken back from both at step end. One whose session moved to
    bob meanwhile stays in alice's count and the tenant's (its day ends them): erasing alice then takes it out
    of the tenant's once, and the tenant's count is bob's alone, not less."""
    door = Door(app_client, redis_client, keys)
    alice = door.users["alice"]
    mail = {"message": "m" * 300, "checkpoint_id": 0}
    for session in ("s-d1", "s-d2"):
        assert (
            door.client.put(f"/v1/sessions/{session}", json={"dmailEnabled": True}, headers=alice).status_code
            == 200
        )
        assert (
            door.client.post(f"/v1/sessions/{session}/context/checkpoint", json={}, headers=alice).status_code
            == 200
        )
    before = (door.user_bytes("alice"), door.tenant_bytes)
    assert door.client.post("/v1/sessions/s-d1/dmail", json=mail, headers=alice).json()["isError"] is False
    assert door.user_bytes("alice") >= before[0] + 300 and door.tenant_bytes >= before[1] + 300
    ended = door.client.post(
        "/v1/sessions/s-d1/steps/end", json={"rejectedWithoutFeedback": True}, headers=alice
    )
    assert ended.json() == {"outcome": "discarded"}
    assert (door.user_bytes("alice"), door.tenant_bytes) == before

    assert door.client.post("/v1/sessions/s-d2/dmail", json=mail, headers=alice).json()["isError"] is False
    counted = (door.user_bytes("alice"), door.tenant_bytes)
    assert (
        door.client.put("/v1/sessions/s-d2", json={"userId": "bob"}, headers=door.operator).status_code == 200
    )
    ended = door.client.post(
        "/v1/sessions/s-d2/steps/end", json={"rejectedWithoutFeedback": True}, headers=door.operator
    )
    assert ended.json() == {"outcome": "discarded"}
    assert (door.user_bytes("alice"), door.tenant_bytes) == counted  # left to its day, in both
    assert door.client.delete("/v1/users/alice", headers=door.operator).status_code == 200
    assert door.tenant_bytes == door.user_bytes("bob")
