"""A tenant's API keys: listed from its own index, and at most ``AGENT_SIGNAL_TENANT_MAX_KEYS`` of them active
(worker/ops/key_index.py). A hostile-caller walk: one tenant's admin made 20,000 keys, kept for good, and another
tenant's key listing read all of them to find its own."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from producers.http.app import create_web_app
from tests.conftest import SettingsFactory
from worker.keys.layout import BucketKeys
from worker.ops.credentials import CredentialStore

BOOT = "bootstrap-key-for-tests-0123456789"
ROOT_AUTH = {"Authorization": f"Bearer {BOOT}"}


@pytest.fixture
def open_app(make_settings: SettingsFactory) -> Iterator[Callable[..., TestClient]]:
    clients: list[TestClient] = []

    def start(**overrides: Any) -> TestClient:
        client = TestClient(create_web_app(make_settings(bootstrap_key=BOOT, auth_cache_s=0, **overrides)))
        clients.append(client)
        return client.__enter__()

    yield start
    for client in clients:
        client.__exit__(None, None, None)


def _create(client: TestClient, tenant: str, auth: dict[str, str] = ROOT_AUTH) -> Any:
    return client.post("/v1/keys", json={"tenant": tenant, "role": "read", "name": "n"}, headers=auth)


def test_a_tenant_at_its_key_limit_is_refused_until_it_revokes_one(
    open_app: Callable[..., TestClient],
) -> None:
    """The third active key of a tenant allowed two is 429 quota_exceeded naming ``tenant`` (and the setting);
    another tenant is not held; a revoke makes room, and a revoked key is still listed."""
    client = open_app(tenant_max_keys=2)
    first, second = (_create(client, "acme").json() for _ in range(2))
    refused = _create(client, "acme")
    assert refused.status_code == 429, refused.text
    error = refused.json()["error"]
    assert (error["code"], error["field"]) == ("quota_exceeded", "tenant")
    assert "AGENT_SIGNAL_TENANT_MAX_KEYS" in error["message"]
    assert _create(client, "globex").status_code == 201
    assert client.delete(f"/v1/keys/{first['id']}", headers=ROOT_AUTH).status_code == 200
    assert _create(client, "acme").status_code == 201
    listed = client.get("/v1/keys?tenant=acme", headers=ROOT_AUTH).json()["keys"]
    assert len(listed) == 3 and {first["id"], second["id"]} <= {k["id"] for k in listed}


def test_a_listing_reads_its_tenants_index_only(
    open_app: Callable[..., TestClient], redis_client: Redis, keys: BucketKeys
) -> None:
    """acme's listing reads acme's set: a key of globex's whose id the global set holds is never read for it (its
    record made unreadable here would fail a listing that reads every key)."""
    client = open_app()
    mine = _create(client, "acme").json()
    theirs = _create(client, "globex").json()
    redis_client.delete(keys.api_key(theirs["id"]))
    redis_client.set(keys.api_key(theirs["id"]), "not a hash")  # WRONGTYPE for whoever reads it
    listed = client.get("/v1/keys?tenant=acme", headers=ROOT_AUTH)
    assert listed.status_code == 200, listed.text
    assert [k["id"] for k in listed.json()["keys"]] == [mine["id"]]


def test_keys_made_before_the_index_are_indexed_once(redis_client: Redis, keys: BucketKeys) -> None:
    """Keys stored before the tenant indexes (only the global set and their records) are listed by tenant and
    counted toward the limit, revoked ones listed and not counted."""
    store = CredentialStore(redis_client, keys)
    made = [
        store.create("acme", "read")[0],
        store.create("acme", "ingest")[0],
        store.create("globex", "read")[0],
    ]
    store.revoke(made[1].id)
    for tenant in ("acme", "globex"):
        redis_client.delete(keys.api_keys_of(tenant), keys.active_api_keys_of(tenant))
    redis_client.delete(keys.api_keys_indexed)
    later = CredentialStore(redis_client, keys, tenant_max_keys=2)
    # oldest first, two made in one millisecond by id (a loaded run made them so)
    oldest_first = sorted(made[:2], key=lambda r: (r.created_at_ms, r.id))
    assert [r.id for r in later.list("acme")] == [r.id for r in oldest_first]
    assert redis_client.smembers(keys.active_api_keys_of("acme")) == {made[0].id}
    later.create("acme", "read")
    with pytest.raises(ValueError, match="AGENT_SIGNAL_TENANT_MAX_KEYS"):
        later.create("acme", "read")


def test_a_key_made_by_code_of_before_after_the_index_is_listed(
    redis_client: Redis, keys: BucketKeys
) -> None:
    """A review: during an upgrade, code of before makes a key as it did (its record and the global set only) after
    the index was built; the tenant's listing missed it, and its cap did not count it, while it authenticated. The
    mark counts the keys indexed, so a key it does not count has the index built again."""
    store = CredentialStore(redis_client, keys, tenant_max_keys=2)
    made = store.create("acme", "read")[0]
    assert [r.id for r in store.list("acme")] == [made.id]
    redis_client.hset(
        keys.api_key("key_0123456789abcdef"), mapping={"tenant": "acme", "role": "read", "name": ""}
    )
    redis_client.sadd(keys.api_keys, "key_0123456789abcdef")  # as code of before did
    assert {r.id for r in store.list("acme")} == {made.id, "key_0123456789abcdef"}
    with pytest.raises(ValueError, match="AGENT_SIGNAL_TENANT_MAX_KEYS"):
        store.create("acme", "read")


def test_a_create_that_loses_the_last_room_to_a_racer_is_refused(
    redis_client: Redis, keys: BucketKeys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A review: racing creates ended over the limit (the last try checked without a watch). Here another create
    takes the last room between this one's check and its write: this one's transaction fails its WATCH, checks
    again, and is refused; one key is active."""
    from redis.client import Pipeline

    store, racer = CredentialStore(redis_client, keys, tenant_max_keys=1), CredentialStore(redis_client, keys)
    store.list("acme")
    original = Pipeline.multi
    raced: list[str] = []

    def multi(self: Pipeline) -> None:
        if not raced:  # once: the racer's create lands after our check, before our write
            raced.append("")  # the racer's own transaction runs as it is
            raced[0] = racer.create("acme", "read")[0].id
        original(self)

    monkeypatch.setattr(Pipeline, "multi", multi)
    with pytest.raises(ValueError, match="AGENT_SIGNAL_TENANT_MAX_KEYS"):
        store.create("acme", "read")
    assert redis_client.smembers(keys.active_api_keys_of("acme")) == set(raced)


def test_a_revoked_keys_record_expires_and_leaves_its_tenants_listing(
    redis_client: Redis, keys: BucketKeys
) -> None:
    """A create-and-revoke loop kept ~720 B a pair for good: a revoked key's record now expires after
    REVOKED_KEY_KEEP_S (listed as revoked until then), and the next listing takes its id out of the tenant's index;
    the global set keeps the id, so credentials stay configured."""
    from worker.ops.key_index import REVOKED_KEY_KEEP_S

    store = CredentialStore(redis_client, keys)
    kept, revoked = store.create("acme", "read")[0], store.create("acme", "read")[0]
    store.revoke(revoked.id)
    assert 0 < redis_client.ttl(keys.api_key(revoked.id)) <= REVOKED_KEY_KEEP_S
    assert redis_client.ttl(keys.api_key(kept.id)) == -1
    assert {r.id for r in store.list("acme")} == {kept.id, revoked.id}
    redis_client.delete(keys.api_key(revoked.id))  # as its TTL would
    assert [r.id for r in store.list("acme")] == [kept.id]
    assert redis_client.smembers(keys.api_keys_of("acme")) == {kept.id}
    store.revoke(kept.id)
    redis_client.delete(keys.api_key(kept.id))
    assert CredentialStore(redis_client, keys).configured()


def test_racing_revokes_of_one_key_audit_it_once(redis_client: Redis, keys: BucketKeys) -> None:
    """Three revokes that each read the key active before any of them wrote: one ``key.revoke`` entry, by the
    revoke that set ``revokedAt`` (an operator race walk found two entries for one key)."""
    store = CredentialStore(redis_client, keys)
    record, _ = store.create("acme", "read")
    racers = 3
    barrier = threading.Barrier(racers)
    read = store.read

    def read_then_wait(key_id: str) -> Any:
        found = read(key_id)
        barrier.wait(
            timeout=30
        )  # every racer has read before any goes on (each reads twice: before and after)
        return found

    store.read = read_then_wait  # type: ignore[method-assign]
    with ThreadPoolExecutor(racers) as pool:
        answers = list(pool.map(lambda actor: store.revoke(record.id, actor=actor), ["a", "b", "c"]))
    assert all(answer is not None and not answer.active for answer in answers)
    audit = redis_client.xrange(keys.for_tenant("acme").audit) or []
    assert [fields["action"] for _, fields in audit] == ["key.create", "key.revoke"]
