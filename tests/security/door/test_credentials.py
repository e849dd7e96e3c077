"""Credentials (issue 12): API keys over the CLI and HTTP, user tokens, roles, rate limits, secure by default.

Every test runs on a real Redis under its own key prefix (tests/conftest.py). Revocation is checked with the
verification cache off (``auth_cache_s=0``) or with a stopped clock, never by sleeping.
"""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Annotated, Any

import jwt
import pytest
from fastapi import Depends, FastAPI
from fastapi.testclient import TestClient
from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from producers.http.access.auth import is_loopback
from producers.http.access.principal import Principal, require
from producers.http.app import create_web_app
from tests.conftest import ROOT, SettingsFactory, free_port, settings_env
from worker.keys.layout import BucketKeys
from worker.ops.credentials import CredentialStore, hash_secret
from worker.ops.rate_limit import RateLimiter
from worker.settings import Settings, SettingsError

pytestmark = pytest.mark.integration

BOOT = "bootstrap-key-for-tests-0123456789"
ROOT_AUTH = {"Authorization": f"Bearer {BOOT}"}


def bearer(credential: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {credential}"}


def with_whoami(app: FastAPI) -> FastAPI:
    """A probe route (this test's app only) that shows the principal a credential resolved to."""

    @app.get("/v1/test-whoami")
    def whoami(principal: Annotated[Principal, Depends(require("read", users=True))]) -> dict[str, Any]:
        return {"tenant": principal.tenant, "role": principal.role, "userId": principal.user_id}

    return app


@pytest.fixture
def open_app(make_settings: SettingsFactory) -> Iterator[Callable[..., TestClient]]:
    """Factory: a started TestClient of ``create_web_app`` (bootstrap key set, no verification cache)."""
    clients: list[TestClient] = []

    def start(**overrides: Any) -> TestClient:
        values: dict[str, Any] = {"bootstrap_key": BOOT, "auth_cache_s": 0, **overrides}
        client = TestClient(with_whoami(create_web_app(make_settings(**values))))
        clients.append(client)
        return client.__enter__()

    yield start
    for client in clients:
        client.__exit__(None, None, None)


@pytest.fixture
def client(open_app: Callable[..., TestClient]) -> TestClient:
    return open_app()


def create_key(
    client: TestClient, role: str, tenant: str = "default", auth: dict[str, str] = ROOT_AUTH
) -> str:
    response = client.post("/v1/keys", json={"tenant": tenant, "role": role, "name": "t"}, headers=auth)
    assert response.status_code == 201, response.text
    return str(response.json()["key"])


def cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "producers.cli", *args],
        cwd=ROOT,
        env=settings_env(settings),
        capture_output=True,
        text=True,
        timeout=60,
    )


class TestKeysFromTheCli:
    def test_a_key_made_where_the_bootstrap_key_is_set_is_not_the_first(
        self, make_settings: SettingsFactory
    ) -> None:
        """A pod's `keys create` (its REDIS_URL and AGENT_SIGNAL_BOOTSTRAP_KEY set, no key stored yet) said that it
        made the deployment's first key and that every call needs a credential now: the bootstrap key had asked
        for one all along. It says nothing now."""
        settings = make_settings(bootstrap_key=BOOT, auth_cache_s=0)
        created = cli(
            settings, "keys", "create", "--tenant", "default", "--role", "metrics", "--name", "keda"
        )
        assert created.returncode == 0, created.stderr
        assert json.loads(created.stdout)["role"] == "metrics"
        assert "first key" not in created.stderr, created.stderr

    def test_create_list_revoke(
        self, make_settings: SettingsFactory, open_app: Callable[..., TestClient]
    ) -> None:
        """`keys create` prints {id, tenant, role, key} once; `keys list` shows no secret; a revoked key is 401."""
        settings = make_settings(auth_cache_s=0)
        created = cli(settings, "keys", "create", "--tenant", "acme", "--role", "read", "--name", "ci")
        assert created.returncode == 0, created.stderr
        key = json.loads(created.stdout)
        assert set(key) == {"id", "tenant", "role", "key"}
        assert (key["tenant"], key["role"]) == ("acme", "read") and key["key"].startswith("as_")
        # the deployment's first key: from now on every call needs one, and a read key cannot make more
        assert "the deployment's first key" in created.stderr and "--role admin --redis" in created.stderr
        again = cli(settings, "keys", "create", "--tenant", "acme", "--role", "admin")
        assert again.returncode == 0 and again.stderr == "", again.stderr
        listed = cli(settings, "keys", "list", "--tenant", "acme")
        assert listed.returncode == 0, listed.stderr
        entry, _ = sorted(json.loads(listed.stdout), key=lambda k: k["id"] != key["id"])
        assert entry["id"] == key["id"] and entry["name"] == "ci"
        assert key["key"] not in listed.stdout and "hash" not in entry
        client = open_app()
        assert client.get("/v1/test-whoami", headers=bearer(key["key"])).json()["tenant"] == "acme"
        revoked = cli(settings, "keys", "revoke", key["id"])
        assert revoked.returncode == 0 and "revokedAt" in json.loads(revoked.stdout)
        assert client.get("/v1/test-whoami", headers=bearer(key["key"])).status_code == 401
        assert cli(settings, "keys", "revoke", "key_0000000000000000").returncode == 1

    def test_bad_role_is_one_line(self, make_settings: SettingsFactory) -> None:
        """An unknown role or tenant is refused with a one-line error, never a traceback."""
        result = cli(make_settings(), "keys", "create", "--tenant", "Bad Tenant", "--role", "read")
        assert result.returncode == 2 and "tenant must match" in result.stderr
        assert "Traceback" not in result.stderr


class TestKeysOverHttp:
    def test_create_list_revoke(self, client: TestClient) -> None:
        """An admin key creates, lists (no secrets) and revokes keys of its own tenant."""
        admin = create_key(client, "admin", tenant="acme")
        response = client.post("/v1/keys", json={"role": "ingest"}, headers=bearer(admin))
        assert response.status_code == 201
        created = response.json()
        assert set(created) == {"id", "tenant", "role", "key", "name"} and created["tenant"] == "acme"
        listed = client.get("/v1/keys", headers=bearer(admin))
        assert {k["id"] for k in listed.json()["keys"]} >= {created["id"]}
        assert created["key"] not in listed.text and "sha256" not in listed.text
        gone = client.delete(f"/v1/keys/{created['id']}", headers=bearer(admin))
        assert gone.status_code == 200 and "revokedAt" in gone.json()
        assert client.get("/v1/test-whoami", headers=bearer(created["key"])).status_code == 401

    def test_the_bootstrap_key_lists_every_tenants_keys_without_a_tenant(self, client: TestClient) -> None:
        """Over HTTP the bootstrap key without ``?tenant`` listed tenant default's keys only, while ``keys list``
        against the store listed every tenant's: the same command answered two ways by target."""
        acme, globex = create_key(client, "admin", tenant="acme"), create_key(client, "read", tenant="globex")
        listed = client.get("/v1/keys", headers=ROOT_AUTH).json()["keys"]
        assert {k["tenant"] for k in listed} >= {"acme", "globex"}
        only = client.get("/v1/keys", params={"tenant": "acme"}, headers=ROOT_AUTH).json()["keys"]
        assert {k["tenant"] for k in only} == {"acme"}
        assert {k["tenant"] for k in client.get("/v1/keys", headers=bearer(acme)).json()["keys"]} == {"acme"}
        assert globex not in str(listed)
        # a name no tenant can have is a 422 naming it, not an empty list (a contract audit)
        bad = client.get("/v1/keys", params={"tenant": "a b"}, headers=ROOT_AUTH)
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "tenant", bad.text

    def test_a_bootstrap_key_read_with_its_line_end_is_the_key_without_it(self, make_settings: Any) -> None:
        """``AGENT_SIGNAL_BOOTSTRAP_KEY="$(cat key.txt)"`` of a CRLF file kept the CR: no client could send that
        key (a header cannot carry a CR), and the CLI sends it stripped."""
        settings = make_settings(bootstrap_key=BOOT + "\r\n", auth_cache_s=0)
        with TestClient(create_web_app(settings)) as fresh:
            assert fresh.get("/v1/keys", headers=ROOT_AUTH).status_code == 200

    def test_an_empty_tenant_is_a_422_not_the_callers(self, client: TestClient) -> None:
        """``"tenant": ""`` made a key of the caller's tenant (read as absent); it names the field now."""
        admin = create_key(client, "admin", tenant="acme")
        refused = client.post("/v1/keys", json={"tenant": "", "role": "ingest"}, headers=bearer(admin))
        assert refused.status_code == 422 and refused.json()["error"]["field"] == "tenant", refused.text
        assert [k["role"] for k in client.get("/v1/keys", headers=bearer(admin)).json()["keys"]] == ["admin"]

    def test_secret_is_stored_only_as_a_hash(
        self, client: TestClient, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """No key or value under the prefix contains the secret (or its random part); its SHA-256 is there."""
        secret = create_key(client, "read")
        # "as_<hex id>_<random>": the random part may itself hold "_", so it is what follows the second one.
        random_part = secret.split("_", 2)[2]
        assert len(random_part) >= 40, random_part
        found_hash = False
        for name in redis_client.scan_iter(match=f"{keys.prefix}*"):
            assert random_part not in name
            kind = redis_client.type(name)
            if kind == "hash":
                values = list(redis_client.hgetall(name).values())
            elif kind == "stream":
                values = [json.dumps(fields) for _, fields in redis_client.xrange(name) or []]
            elif kind == "string":
                values = [redis_client.get(name) or ""]
            else:
                continue
            assert not any(random_part in v for v in values), name
            found_hash = found_hash or hash_secret(secret) in values
        assert found_hash

    def test_create_and_revoke_are_audited(
        self, client: TestClient, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """The tenant's audit stream records who created and revoked which key, without the secret."""
        created = client.post("/v1/keys", json={"tenant": "acme", "role": "read"}, headers=ROOT_AUTH).json()
        client.delete(f"/v1/keys/{created['id']}", headers=ROOT_AUTH)
        entries = [
            dict(fields or {}) for _, fields in redis_client.xrange(keys.for_tenant("acme").audit) or []
        ]
        assert [(e["action"], e["keyId"], e["actor"]) for e in entries] == [
            ("key.create", created["id"], "bootstrap"),
            ("key.revoke", created["id"], "bootstrap"),
        ]
        assert created["key"] not in json.dumps(entries)


class TestRoles:
    def test_no_credential_is_401_with_www_authenticate(self, client: TestClient) -> None:
        """No credential, a wrong one or another scheme: 401 unauthorized with WWW-Authenticate: Bearer."""
        for headers in ({}, bearer("as_0000000000000000_" + "x" * 43), {"Authorization": f"Basic {BOOT}"}):
            response = client.get("/v1/keys", headers=headers)
            assert response.status_code == 401
            assert response.json()["error"]["code"] == "unauthorized"
            assert response.headers["www-authenticate"] == "Bearer"

    def test_missing_role_is_403(self, client: TestClient) -> None:
        """A read key cannot manage keys; an ingest key cannot mint tokens."""
        reader, ingester = create_key(client, "read"), create_key(client, "ingest")
        response = client.post("/v1/keys", json={"role": "read"}, headers=bearer(reader))
        assert response.status_code == 403 and response.json()["error"]["code"] == "forbidden"
        assert client.post("/v1/tokens", json={"userId": "u1"}, headers=bearer(ingester)).status_code == 403

    def test_an_admin_stays_in_its_tenant(self, client: TestClient) -> None:
        """Another tenant's keys: 403 to create or list, 404 to revoke; the bootstrap key onboards any tenant."""
        acme_admin = create_key(client, "admin", tenant="acme")
        other = client.post("/v1/keys", json={"tenant": "globex", "role": "read"}, headers=ROOT_AUTH)
        assert other.status_code == 201
        assert (
            client.post("/v1/keys", json={"tenant": "globex", "role": "read"}, headers=bearer(acme_admin))
        ).status_code == 403
        assert client.get("/v1/keys?tenant=globex", headers=bearer(acme_admin)).status_code == 403
        response = client.delete(f"/v1/keys/{other.json()['id']}", headers=bearer(acme_admin))
        assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
        assert other.json()["key"] not in client.get("/v1/keys", headers=bearer(acme_admin)).text


class TestUserTokens:
    def test_mint_and_use(self, client: TestClient) -> None:
        """An operate key mints a token for one user of its tenant; the token speaks for that user only."""
        operator = create_key(client, "operate", tenant="acme")
        response = client.post("/v1/tokens", json={"userId": "u1", "ttlS": 60}, headers=bearer(operator))
        assert response.status_code == 200
        body = response.json()
        assert 0 < body["expiresAt"] - time.time() * 1000 <= 60_000
        me = client.get("/v1/test-whoami", headers=bearer(body["token"])).json()
        assert me == {"tenant": "acme", "role": "user", "userId": "u1"}
        minted = client.post("/v1/tokens", json={"userId": "u2"}, headers=bearer(body["token"]))
        assert minted.status_code == 403  # user tokens cannot mint

    def test_ttl_and_user_id_are_checked(self, client: TestClient) -> None:
        """ttlS outside 1..86400 and a userId outside the id rule are 422s naming the field."""
        for body, field in (
            ({"userId": "u1", "ttlS": 0}, "ttlS"),
            ({"userId": "u1", "ttlS": 86401}, "ttlS"),
            ({"userId": "u\x1fx"}, "userId"),
        ):
            response = client.post("/v1/tokens", json=body, headers=ROOT_AUTH)
            assert response.status_code == 422 and response.json()["error"]["field"] == field

    def test_expired_and_forged_tokens_are_401(
        self, client: TestClient, make_settings: SettingsFactory, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """A token whose exp has passed, or one signed with another secret, is 401."""
        client.post("/v1/tokens", json={"userId": "u1"}, headers=ROOT_AUTH)  # creates the shared secret
        secret = CredentialStore(redis_client, keys).signing_secret()
        past = int(time.time()) - 10
        claims = {
            "tenant": "default",
            "sub": "u1",
            "iat": past - 60,
            "exp": past,
            "jti": "j",
            "kid": "bootstrap",
        }
        expired = jwt.encode(claims, secret, algorithm="HS256")
        forged = jwt.encode({**claims, "exp": past + 3600}, "x" * 64, algorithm="HS256")
        for token in (expired, forged):
            assert client.get("/v1/test-whoami", headers=bearer(token)).status_code == 401

    def test_tokens_of_a_revoked_issuer_are_401(self, client: TestClient) -> None:
        """Revoking the key that minted a token ends the token too."""
        created = client.post("/v1/keys", json={"role": "operate"}, headers=ROOT_AUTH).json()
        token = client.post("/v1/tokens", json={"userId": "u1"}, headers=bearer(created["key"])).json()[
            "token"
        ]
        assert client.get("/v1/test-whoami", headers=bearer(token)).status_code == 200
        client.delete(f"/v1/keys/{created['id']}", headers=ROOT_AUTH)
        assert client.get("/v1/test-whoami", headers=bearer(token)).status_code == 401

    def test_a_revoke_takes_effect_within_the_cache_window(
        self, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """A verifying process trusts a cached key for ``cache_s`` (by its monotonic clock) and no longer."""
        clock = [1000.0]
        web = CredentialStore(redis_client, keys, cache_s=2.0)
        web_clock = pytest.MonkeyPatch()
        web_clock.setattr("worker.ops.credentials.time.monotonic", lambda: clock[0])
        try:
            record, secret = CredentialStore(redis_client, keys).create("default", "read")
            assert web.verify(secret) is not None
            CredentialStore(redis_client, keys).revoke(record.id)
            clock[0] += 1.9
            assert web.verify(secret) is not None  # still cached
            clock[0] += 0.2
            assert web.verify(secret) is None
        finally:
            web_clock.undo()


class TestRateLimit:
    def test_over_the_rate_is_429_with_retry_after(
        self, open_app: Callable[..., TestClient], redis_client: Redis, keys: BucketKeys
    ) -> None:
        """One request per 5 s (burst 1): the second within the window is 429 with Retry-After in 1..5;
        another credential has its own bucket."""
        client = open_app(rate_limit_per_s=0.2)
        store = CredentialStore(redis_client, keys)
        reader, other = store.create("default", "read")[1], store.create("default", "read")[1]
        assert client.get("/v1/test-whoami", headers=bearer(reader)).status_code == 200
        response = client.get("/v1/test-whoami", headers=bearer(reader))
        assert response.status_code == 429 and response.json()["error"]["code"] == "rate_limited"
        assert 1 <= int(response.headers["retry-after"]) <= 5
        assert client.get("/v1/test-whoami", headers=bearer(other)).status_code == 200

    def test_tokens_taken_in_chunks_never_exceed_the_bucket(self, redis_url: str, keys: BucketKeys) -> None:
        """The web's limiter takes tokens a chunk at a time, yet over a burst lets through no more than the
        bucket held plus what refilled meanwhile (and at least the bucket)."""
        limiter = RateLimiter(keys, 50.0)  # burst 50, chunks of 5

        async def burst() -> tuple[int, float]:
            client = AsyncRedis.from_url(redis_url, decode_responses=True)
            try:
                started = time.monotonic()
                decisions = [await limiter.acheck(client, "key_x") for _ in range(200)]
                return sum(d.allowed for d in decisions), time.monotonic() - started
            finally:
                await client.aclose()

        allowed, elapsed_s = asyncio.run(burst())
        assert limiter.chunk == 5
        assert 50 <= allowed <= 50 + math.ceil(50 * elapsed_s) + limiter.chunk

    def test_requests_at_once_within_the_burst_all_pass(self, redis_url: str, keys: BucketKeys) -> None:
        """50 requests of one credential at once against a burst of 100: each that found no tokens held took a
        chunk from Redis, so the bucket ran dry with most of its tokens held in this process, and the requests
        Redis refused were answered 429 (a TypeScript walk: 28 of 50). A refused one now spends a held token."""
        limiter = RateLimiter(keys, 100.0)  # burst 100, chunks of 10

        async def at_once() -> int:
            client = AsyncRedis.from_url(redis_url, decode_responses=True)
            try:
                decisions = await asyncio.gather(*(limiter.acheck(client, "key_y") for _ in range(50)))
                return sum(d.allowed for d in decisions)
            finally:
                await client.aclose()

        assert asyncio.run(at_once()) == 50

    def test_without_credentials_there_is_no_default_limit(self, make_settings: SettingsFactory) -> None:
        """Local single-tenant use (no credential configured) is not rate limited unless the setting says so."""
        with TestClient(with_whoami(create_web_app(make_settings()))) as client:
            statuses = {client.get("/v1/test-whoami").status_code for _ in range(150)}
        assert statuses == {200}


class TestSecureByDefault:
    def test_refuses_a_public_host_without_credentials(self, make_settings: SettingsFactory) -> None:
        """On 0.0.0.0 with no credential, the app's startup and `agent-signal web` refuse, naming the key."""
        settings = make_settings(host="0.0.0.0", port=free_port())  # the command binds it before its checks
        with pytest.raises(SettingsError, match="AGENT_SIGNAL_BOOTSTRAP_KEY"):
            with TestClient(create_web_app(settings)):
                pass
        result = cli(settings, "web")
        assert result.returncode == 2
        (line,) = result.stderr.strip().splitlines()
        assert "0.0.0.0 is not a loopback address" in line and "AGENT_SIGNAL_BOOTSTRAP_KEY" in line

    def test_refuses_a_short_bootstrap_key(self, make_settings: SettingsFactory) -> None:
        """A bootstrap key under 16 characters stops the app, naming the variable and not the value."""
        with pytest.raises(SettingsError, match="AGENT_SIGNAL_BOOTSTRAP_KEY must be at least 16") as info:
            with TestClient(create_web_app(make_settings(bootstrap_key="short-key"))):
                pass
        assert "short-key" not in str(info.value)

    def test_a_stored_key_is_a_credential(
        self, make_settings: SettingsFactory, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """A created key lets the app serve on 0.0.0.0; revoking it does not turn auth back off."""
        record, secret = CredentialStore(redis_client, keys).create("default", "read")
        CredentialStore(redis_client, keys).revoke(record.id)
        app = with_whoami(create_web_app(make_settings(host="0.0.0.0", auth_cache_s=0)))
        with TestClient(app) as client:
            assert client.get("/v1/test-whoami").status_code == 401
            assert client.get("/v1/test-whoami", headers=bearer(secret)).status_code == 401

    def test_deprecated_api_token_is_the_bootstrap_key(self, make_settings: SettingsFactory) -> None:
        """AGENT_SIGNAL_API_TOKEN still works, as an admin key of tenant default."""
        with TestClient(with_whoami(create_web_app(make_settings(api_token="legacy")))) as client:
            assert client.get("/v1/test-whoami").status_code == 401
            me = client.get("/v1/test-whoami", headers=bearer("legacy")).json()
            assert me == {"tenant": "default", "role": "admin", "userId": None}


class TestTheDoor:
    def test_v1_needs_a_credential_even_where_a_route_forgot_its_guard(
        self, open_app: Callable[..., TestClient]
    ) -> None:
        """With credentials configured, a /v1 route without require(...) is still 401 without a credential."""
        client = open_app()
        client.app.get("/v1/test-unguarded")(lambda: {"ok": True})  # type: ignore[attr-defined]
        assert client.get("/v1/test-unguarded").status_code == 401
        assert client.get("/v1/test-unguarded", headers=ROOT_AUTH).json() == {"ok": True}

    def test_a_sent_credential_is_always_checked(self, make_settings: SettingsFactory) -> None:
        """Without credentials configured a caller is the local admin, but a wrong credential is still 401."""
        with TestClient(with_whoami(create_web_app(make_settings()))) as client:
            assert client.get("/v1/test-whoami").json()["role"] == "admin"
            assert client.get("/v1/test-whoami", headers=bearer("not-a-key")).status_code == 401

    @pytest.mark.parametrize(
        ("host", "loopback"),
        [
            *[("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("[::1]", True), ("localhost", True)],
            *[("0.0.0.0", False), ("::", False), ("10.0.0.5", False), ("example.com", False)],
        ],
    )
    def test_loopback_hosts(self, host: str, loopback: bool) -> None:
        """Which bind addresses count as loopback (no credential needed to start)."""
        assert is_loopback(host) is loopback


class TestOperationsSurfaces:
    OPS = ("/metrics", "/metrics/state", "/v1/backlog", "/openapi.json", "/docs", "/redoc")

    @pytest.fixture
    def public(self, open_app: Callable[..., TestClient]) -> Iterator[TestClient]:
        yield open_app(host="0.0.0.0")

    def test_protected_by_default(self, client: TestClient, public: TestClient) -> None:
        """On loopback as off it (no value decides by the bind address): no credential 401, an ingest key or a
        user token 403, a read key 200."""
        for app in (client, public):
            reader, ingester = create_key(app, "read"), create_key(app, "ingest")
            token = app.post("/v1/tokens", json={"userId": "u1"}, headers=ROOT_AUTH).json()["token"]
            for path in self.OPS:
                assert app.get(path).status_code == 401, path
                assert app.get(path, headers=bearer(ingester)).status_code == 403, path
                assert app.get(path, headers=bearer(token)).status_code == 403, path
                assert app.get(path, headers=bearer(reader)).status_code in (200, 503), path

    def test_open_when_told(self, open_app: Callable[..., TestClient]) -> None:
        """With ops_open=always they answer without a credential (make run sets it)."""
        client = open_app(host="0.0.0.0", ops_open="always")
        for path in ("/metrics", "/openapi.json", "/docs"):
            assert client.get(path).status_code == 200, path
