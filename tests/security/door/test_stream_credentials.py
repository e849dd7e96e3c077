"""An open receipts stream does not outlive its credential (producers/http/streams/credential.py): the stream
re-checks its bearer with the auth middleware's cached lookup and ends, after a ``: credential no longer valid``
comment, once its key is revoked, once the key that minted its user token is revoked, and when its token expires;
and after ``: user erased`` once its user is erased.

The web app served over real HTTP (``serve_web``) and httpx with a read timeout shorter than the keep-alive interval: a stream
that kept going would fail the test with ReadTimeout instead of hanging it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.integration

BOOT = "bootstrap-key-for-stream-credentials-0123456789"
STREAM = "/v1/receipts/stream"
OWNER = {"userId": "u1", "agentId": "a1", "topicId": "t1"}
READ_TIMEOUT_S = 10.0  # under the 15 s keep-alive: a stream that does not end times out


def _bearer(credential: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {credential}"}


@pytest.fixture
def web(make_settings: Any, serve_web: Any) -> Iterator[httpx.Client]:
    """The web app with credentials (the default 2 s auth cache) and a client with a read timeout."""
    _, url = serve_web(make_settings(bootstrap_key=BOOT, rate_limit_per_s=0))
    with httpx.Client(base_url=url, timeout=httpx.Timeout(30, read=READ_TIMEOUT_S)) as client:
        yield client


def _key(client: httpx.Client, role: str) -> dict[str, Any]:
    made = client.post("/v1/keys", json={"role": role}, headers=_bearer(BOOT))
    assert made.status_code == 201, made.text
    return dict(made.json())


def _token(client: httpx.Client, issuer: dict[str, Any], ttl_s: int = 3600) -> str:
    minted = client.post("/v1/tokens", json={"userId": "u1", "ttlS": ttl_s}, headers=_bearer(issuer["key"]))
    assert minted.status_code == 200, minted.text
    return str(minted.json()["token"])


def _stream_until_it_ends(client: httpx.Client, bearer: str, when_open: Any = None) -> list[str]:
    """The stream's non-empty lines once the server ended it (``when_open`` runs once it is connected)."""
    lines: list[str] = []
    with client.stream("GET", STREAM, params=OWNER, headers=_bearer(bearer)) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line:
                lines.append(line)
            if line == ": connected":
                if when_open is not None:
                    when_open()
    return lines


def test_a_revoked_keys_stream_ends(web: httpx.Client) -> None:
    """A read key's stream ends within a few seconds of ``DELETE /v1/keys/{id}``; a new one is refused 401."""
    key = _key(web, "read")

    def revoke() -> None:
        assert web.delete(f"/v1/keys/{key['id']}", headers=_bearer(BOOT)).status_code == 200

    lines = _stream_until_it_ends(web, key["key"], revoke)
    assert lines == [": connected", ": credential no longer valid"]
    assert web.get(STREAM, params=OWNER, headers=_bearer(key["key"])).status_code == 401


def test_a_user_tokens_stream_ends_when_its_issuer_is_revoked(web: httpx.Client) -> None:
    """A user token stays valid only while the key that minted it is: its stream ends when that key goes."""
    issuer = _key(web, "operate")
    token = _token(web, issuer)

    def revoke() -> None:
        assert web.delete(f"/v1/keys/{issuer['id']}", headers=_bearer(BOOT)).status_code == 200

    lines = _stream_until_it_ends(web, token, revoke)
    assert lines == [": connected", ": credential no longer valid"]


def test_a_user_tokens_stream_ends_when_the_token_expires(web: httpx.Client) -> None:
    """A token minted for 3 s: its stream ends at its ``exp``, with nothing revoked."""
    token = _token(web, _key(web, "operate"), ttl_s=3)
    lines = _stream_until_it_ends(web, token)
    assert lines == [": connected", ": credential no longer valid"]


def test_a_users_stream_ends_when_the_user_is_erased(web: httpx.Client) -> None:
    """The user's open streams end (``: user erased``): nothing of the user is left for them to show, and a stream
    that went on would show what is written after the erasure as if nothing had happened. The erasure also ends
    the user's tokens issued before it (tests/security/data/test_erasure_ends_tokens.py)."""
    operator = _key(web, "operate")
    token = _token(web, operator)

    def erase() -> None:
        erased = web.delete("/v1/users/u1", headers=_bearer(operator["key"]))
        assert erased.status_code == 200, erased.text

    lines = _stream_until_it_ends(web, token, erase)
    assert lines == [": connected", ": user erased"]
