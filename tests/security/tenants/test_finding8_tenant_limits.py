"""Finding 8 (issue 26): limits are per credential and per process, not per tenant. One ``operate`` key minted
20 user tokens and held all 1,000 streams (tenant B's users got 429); six read keys of tenant A pushed tenant
B's p50 from 6 ms to 3.9 s. Now a tenant has one request bucket over all its keys and the user tokens they mint
(``AGENT_SIGNAL_TENANT_RATE_LIMIT_PER_S``) and one count of open streams across web processes
(``AGENT_SIGNAL_TENANT_MAX_STREAMS``); over either: 429 with Retry-After, and another tenant is unaffected."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from tests.conftest import Proc, SettingsFactory
from tests.security.conftest import ClientFactory
from worker.keys.layout import BucketKeys
from worker.ops.credentials import CredentialStore

pytestmark = pytest.mark.integration

BOOT = "bootstrap-key-for-tests-0123456789"
SECRET = "token-secret-for-the-finding-8-tests-0123456789"


def bearer(credential: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {credential}"}


def _credentials(
    redis_client: Redis, keys: BucketKeys, tenant: str, *, read_keys: int, users: int
) -> list[str]:
    """``read_keys`` read keys of ``tenant`` and ``users`` user tokens minted by one operate key of it, made
    straight in Redis (so setting them up takes nothing from the buckets under test)."""
    store = CredentialStore(redis_client, keys, token_secret=SECRET)
    made = [store.create(tenant, "read")[1] for _ in range(read_keys)]
    operator = store.create(tenant, "operate")[0]
    made += [store.mint_user_token(tenant, f"u{i}", issuer_key_id=operator.id)[0] for i in range(users)]
    return made


def _one_token_tenants(app_client: ClientFactory) -> TestClient:
    """A web app whose credentials pass their own buckets (100/s) but whose tenants hold one token, refilled
    every 100 s."""
    return app_client(
        bootstrap_key=BOOT,
        token_secret=SECRET,
        auth_cache_s=0,
        rate_limit_per_s=100,
        tenant_rate_limit_per_s=0.01,
    )


class TestTenantRate:
    def test_a_tenants_keys_and_user_tokens_share_one_bucket(
        self, app_client: ClientFactory, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """Tenant A's six read keys and six user tokens, one request each, pass their own buckets (100/s) but
        not the tenant's (one token, refilled every 100 s): the first is served, the other eleven get 429
        rate_limited naming the tenant, with Retry-After. Tenant B's key is served meanwhile."""
        client = _one_token_tenants(app_client)
        tenant_a = _credentials(redis_client, keys, "tenant-a", read_keys=6, users=6)
        (tenant_b,) = _credentials(redis_client, keys, "tenant-b", read_keys=1, users=0)
        answers = [
            client.get("/v1/receipts", params={"userId": f"u{i % 6}"}, headers=bearer(c))
            for i, c in enumerate(tenant_a)
        ]
        assert [a.status_code for a in answers] == [200] + [429] * 11, [a.text for a in answers]
        for refused in answers[1:]:
            assert refused.json()["error"]["code"] == "rate_limited"
            assert "this tenant's rate" in refused.json()["error"]["message"]
            assert 1 <= int(refused.headers["retry-after"]) <= 100
        other = client.get("/v1/receipts", params={"userId": "u0"}, headers=bearer(tenant_b))
        assert other.status_code == 200, other.text

    def test_the_operations_reads_are_charged_to_their_credential_alone(
        self, app_client: ClientFactory, redis_client: Redis, keys: BucketKeys
    ) -> None:
        """A tenant whose requests spent its bucket still gets its scrapes and its autoscaler's backlog read:
        ``/metrics``, ``/metrics/state`` and ``/v1/backlog`` take from the credential's bucket, not the tenant's
        (a busy single-tenant deployment lost its scrapes, and KEDA fell back to its floor at peak load)."""
        client = _one_token_tenants(app_client)
        store = CredentialStore(redis_client, keys, token_secret=SECRET)
        reader = store.create("default", "read")[1]
        scraper = store.create("default", "metrics")[1]
        spent = [
            client.get("/v1/receipts", params={"userId": "u0"}, headers=bearer(reader)) for _ in range(2)
        ]
        assert [r.status_code for r in spent] == [200, 429]
        for path in ("/metrics", "/metrics/state", "/v1/backlog"):
            answer = client.get(path, headers=bearer(scraper))
            assert answer.status_code == 200, (path, answer.text)
        again = client.get("/v1/receipts", params={"userId": "u0"}, headers=bearer(reader))
        assert again.status_code == 429  # the scrapes did not refill nor charge the tenant's bucket


# --- open streams, counted across two real web processes ------------------------------------------------

Stream = tuple[int, bytes, asyncio.StreamReader, asyncio.StreamWriter]


async def _open(url: str, credential: str, user_id: str) -> Stream:
    """``GET /v1/receipts/stream`` on a raw socket: (status, head, reader, writer), once a 200 said
    ``: connected`` (its subscription, and its tenant slot, are live)."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(
        f"GET /v1/receipts/stream?userId={user_id} HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Authorization: Bearer {credential}\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    if status == 200:
        await reader.readuntil(b": connected")
    return status, head, reader, writer


def _retry_after(head: bytes) -> int:
    for line in head.decode("latin-1").split("\r\n"):
        name, _, value = line.partition(":")
        if name.strip().lower() == "retry-after":
            return int(value.strip())
    raise AssertionError(f"no Retry-After in {head!r}")


class TestTenantStreams:
    def test_a_tenants_streams_are_counted_across_web_processes_and_a_crash_frees_them(
        self,
        make_settings: SettingsFactory,
        start_web: Callable[..., tuple[Proc, str]],
        redis_client: Redis,
        keys: BucketKeys,
    ) -> None:
        """With AGENT_SIGNAL_TENANT_MAX_STREAMS=4, tenant A's user tokens (one operate key minted them) hold two
        streams on each of two web processes; a fifth on either is 429 too_many_streams with Retry-After, while
        tenant B streams. When one process dies (SIGKILL), its streams' slots lapse with their lease and
        tenant A streams again on the other."""
        settings = make_settings(
            bootstrap_key=BOOT, token_secret=SECRET, tenant_max_streams=4, telemetry_enabled=False
        )
        web_1, url_1 = start_web(settings)
        web_2, url_2 = start_web(settings)
        tenant_a = _credentials(redis_client, keys, "tenant-a", read_keys=0, users=5)
        (tenant_b,) = _credentials(redis_client, keys, "tenant-b", read_keys=0, users=1)

        async def scenario() -> None:
            held = [
                await _open(url, tenant_a[i], f"u{i}") for i, url in enumerate([url_1, url_1, url_2, url_2])
            ]
            assert [s[0] for s in held] == [200] * 4
            for url in (url_1, url_2):
                status, head, body = await _answer(url, tenant_a[4], "u4")
                assert status == 429 and b"too_many_streams" in body, head + body
                assert _retry_after(head) >= 1
            other = await _open(url_1, tenant_b, "u0")
            assert other[0] == 200
            web_2.stop(signal.SIGKILL)  # a crash: nobody gives its two slots back
            deadline = asyncio.get_running_loop().time() + 30
            while (answer := await _answer(url_1, tenant_a[4], "u4"))[0] != 200:
                assert answer[0] == 429 and asyncio.get_running_loop().time() < deadline, answer
                await asyncio.sleep(0.2)
            for _, _, _, writer in [*held, other]:
                await _close(writer)

        asyncio.run(scenario())
        assert web_1.popen.poll() is None


async def _answer(url: str, credential: str, user_id: str) -> tuple[int, bytes, bytes]:
    """Open a stream and close it again: (status, head, the body of a refusal)."""
    status, head, reader, writer = await _open(url, credential, user_id)
    body = b""
    if status != 200:
        for line in head.decode("latin-1").split("\r\n"):
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                body = await reader.readexactly(int(value.strip()))
    await _close(writer)
    return status, head, body


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(OSError):  # the server may have gone first (the crashed process's streams)
        await writer.wait_closed()
