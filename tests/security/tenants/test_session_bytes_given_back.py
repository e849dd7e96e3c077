"""What a session's context drops is given back to the stored-bytes quotas: an audit found that a clear, a
revert, a compaction or an applied D-Mail left every dropped byte counted toward the user's
``AGENT_SIGNAL_USER_MAX_BYTES`` and the tenant's ``AGENT_SIGNAL_TENANT_MAX_BYTES`` until the session's TTL
(checkpoint, 4 KB, revert to 0, six times with a 20,000-byte quota: 429 with Retry-After ~30 days, while the
session stored nothing). Each drop now takes its bytes back from the days they were counted in, none below
zero, and only from the user they were counted for."""

from __future__ import annotations

import time
from typing import Any

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from sessions.store import session_scope
from tests.security.conftest import ClientFactory
from worker.keys.layout import BucketKeys
from worker.ops.credentials import CredentialStore
from worker.store.quotas import DAY_MS

pytestmark = pytest.mark.integration

BOOT = "bootstrap-key-for-tests-0123456789"
SECRET = "token-secret-for-the-given-back-tests-0123456789"
BIG = {"messages": [{"role": "user", "content": "x" * 4000}]}


def bearer(credential: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {credential}"}


def _total(redis_client: Redis, key: str) -> int:
    return sum(int(n) for n in redis_client.hgetall(key).values())


class Door:
    """An app with a 20,000-byte user quota (the audit's); acme's operate key and its users alice and bob."""

    def __init__(self, app_client: ClientFactory, redis_client: Redis, keys: BucketKeys) -> None:
        self.client: TestClient = app_client(
            bootstrap_key=BOOT, token_secret=SECRET, auth_cache_s=0, user_max_bytes=20_000, rate_limit_per_s=0
        )
        store = CredentialStore(redis_client, keys, token_secret=SECRET)
        record, secret = store.create("acme", "operate")
        self.operator = bearer(secret)
        self.users = {
            u: bearer(store.mint_user_token("acme", u, issuer_key_id=record.id)[0]) for u in ("alice", "bob")
        }
        self.redis, self.keys = redis_client, keys.for_tenant("acme")

    def post(self, session: str, path: str, body: Any, headers: dict[str, str]) -> Any:
        answer = self.client.post(f"/v1/sessions/{session}/{path}", json=body, headers=headers)
        assert answer.status_code == 200, answer.text
        return answer.json()

    def counts(self, *users: str) -> tuple[int, ...]:
        """The users' stored bytes, then the tenant's."""
        found = [_total(self.redis, self.keys.user_bytes(u)) for u in users]
        return (*found, _total(self.redis, self.keys.tenant_bytes))

    def context_bytes(self, session: str) -> int:
        return int(self.redis.hget(self.keys.context_meta(session_scope(session)), "bytes") or 0)


def test_reverting_again_and_again_stays_under_the_quota_and_counts_nothing_it_dropped(
    app_client: ClientFactory, redis_client: Redis, keys: BucketKeys
) -> None:
    """The audit's loop: checkpoint, 4 KB, revert to 0, six times, past a 20,000-byte quota in all. Every append
    is taken, and after each revert alice's count and the tenant's are what they were before the checkpoint
    (another session's bytes, counted in the same day, are not taken)."""
    door = Door(app_client, redis_client, keys)
    alice = door.users["alice"]
    for session in ("s-keep", "s-loop"):
        assert door.client.put(f"/v1/sessions/{session}", json={}, headers=alice).status_code == 200
    door.post("s-keep", "context/messages", {"messages": [{"role": "user", "content": "k" * 900}]}, alice)
    before = door.counts("alice")
    for _ in range(6):
        door.post("s-loop", "context/checkpoint", {}, alice)
        door.post("s-loop", "context/messages", BIG, alice)
        assert door.counts("alice")[0] > before[0] + 4000
        assert door.post("s-loop", "context/revert", {"checkpointId": 0}, alice)["messages"] == []
        assert door.counts("alice") == before


def test_a_partial_revert_a_clear_a_compaction_and_an_applied_dmail_keep_only_what_is_stored(
    app_client: ClientFactory, redis_client: Redis, keys: BucketKeys
) -> None:
    """After each drop the counts hold exactly the bytes of the records the context still has (beside the
    session's own settings, counted when it was made)."""
    door = Door(app_client, redis_client, keys)
    alice = door.users["alice"]
    assert door.client.put("/v1/sessions/s-d", json={"dmailEnabled": True}, headers=alice).status_code == 200
    base = door.counts("alice")

    def held() -> tuple[int, int]:
        stored = door.context_bytes("s-d")
        assert stored > 0
        return base[0] + stored, base[1] + stored

    door.post("s-d", "context/messages", BIG, alice)
    door.post("s-d", "context/checkpoint", {}, alice)
    door.post("s-d", "context/messages", BIG, alice)
    door.post("s-d", "context/revert", {"checkpointId": 0}, alice)  # the first 4 KB stays
    assert door.counts("alice") == held()
    door.post("s-d", "context/clear", {}, alice)
    assert door.counts("alice") == base
    door.post("s-d", "context/messages", BIG, alice)
    door.post("s-d", "context/compact", {"messages": [{"role": "user", "content": "summary"}]}, alice)
    assert door.counts("alice") == held()
    door.post("s-d", "context/messages", BIG, alice)
    assert door.post("s-d", "dmail", {"message": "go back", "checkpoint_id": 0}, alice)["isError"] is False
    assert door.post("s-d", "steps/end", {}, alice)["outcome"] == "applied"
    assert door.counts("alice") == held()  # the pending mail's own count was taken back too


def test_bytes_counted_for_another_user_or_in_an_ended_day_are_not_taken(
    app_client: ClientFactory, redis_client: Redis, keys: BucketKeys
) -> None:
    """A session moved from alice to bob leaves what alice's writes counted in her count and the tenant's (its
    days end it; erasing her takes it out of the tenant's): its revert takes nothing from bob, who never held
    it; bob's own writes are given back. Bytes counted in a day that has ended count no longer, so nothing is
    taken for them from a later day's count."""
    door = Door(app_client, redis_client, keys)
    assert door.client.put("/v1/sessions/s-mv", json={}, headers=door.users["alice"]).status_code == 200
    door.post("s-mv", "context/checkpoint", {}, door.users["alice"])
    door.post("s-mv", "context/messages", BIG, door.users["alice"])
    moved = door.client.put("/v1/sessions/s-mv", json={"userId": "bob"}, headers=door.operator)
    assert moved.status_code == 200, moved.text
    counted = door.counts("alice", "bob")
    door.post("s-mv", "context/revert", {"checkpointId": 0}, door.operator)
    assert door.counts("alice", "bob") == counted
    door.post("s-mv", "context/checkpoint", {}, door.operator)
    door.post("s-mv", "context/messages", BIG, door.operator)
    door.post("s-mv", "context/revert", {"checkpointId": 0}, door.operator)
    assert door.counts("alice", "bob") == counted

    # bob's record counted today, as the session's bookkeeping would say of a record written a TTL ago
    door.post("s-mv", "context/messages", BIG, door.operator)
    meta = door.keys.context_meta(session_scope("s-mv"))
    ended = f"d{int(time.time() * 1000) // DAY_MS - 1}"
    for prefix in ("u:", "t:"):
        [(field, value)] = [(f, v) for f, v in redis_client.hgetall(meta).items() if f.startswith(prefix)]
        redis_client.hdel(meta, field)
        redis_client.hset(meta, prefix + ended, value)
    grown = door.counts("alice", "bob")
    door.post("s-mv", "context/clear", {}, door.operator)
    assert door.counts("alice", "bob") == grown
    assert not [f for f in redis_client.hkeys(meta) if f.startswith(("u:", "t:"))]  # the ended day forgotten
