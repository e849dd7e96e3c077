"""A user token minted on a web replica whose clock runs ahead is accepted on the others: its ``iat`` (the minting
clock's) is not checked against the verifier's clock, while its ``exp`` still is (on the service's clock: Redis's).
Real Redis, own key prefix."""

from __future__ import annotations

import time

import jwt
import pytest
from redis import Redis

from worker.keys.layout import BucketKeys
from worker.ops.credentials import ALGORITHM, BOOTSTRAP_ID, CredentialStore

pytestmark = pytest.mark.integration

SECRET = "s" * 48
SKEW_S = 90  # the minting replica's clock is this far ahead of the verifier's


def _store(redis_client: Redis, keys: BucketKeys) -> CredentialStore:
    return CredentialStore(redis_client, keys, bootstrap_key="b" * 32, token_secret=SECRET)


def test_a_token_minted_by_a_replica_ahead_is_accepted(
    redis_client: Redis, keys: BucketKeys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A token whose iat is 90 s in the verifier's future verifies, with its user and its exp."""
    store = _store(redis_client, keys)
    real_time = time.time
    with monkeypatch.context() as ahead:
        ahead.setattr("worker.ops.credentials.time.time", lambda: real_time() + SKEW_S)
        token, expires_at_ms = store.mint_user_token("default", "u1", ttl_s=3600)
    verified = store.verify_user_token(token)
    assert verified is not None
    assert (verified.user_id, verified.expires_at_ms) == ("u1", expires_at_ms)


def test_an_expired_token_is_still_refused_whatever_its_iat(redis_client: Redis, keys: BucketKeys) -> None:
    """exp stays strict on the service's clock (worker/core/clock.py): a token past its exp is refused even with an
    iat ahead."""
    now_s = int(time.time())
    claims = {
        "tenant": "default",
        "sub": "u1",
        "iat": now_s + SKEW_S,
        "exp": now_s - 60,
        "jti": "j1",
        "kid": BOOTSTRAP_ID,
    }
    expired = jwt.encode(claims, SECRET, algorithm=ALGORITHM)
    assert _store(redis_client, keys).verify_user_token(expired) is None


def test_a_token_without_iat_is_still_refused(redis_client: Redis, keys: BucketKeys) -> None:
    """iat stays a required claim: only its comparison with the verifier's clock is dropped."""
    now_s = int(time.time())
    claims = {"tenant": "default", "sub": "u1", "exp": now_s + 3600, "jti": "j2", "kid": BOOTSTRAP_ID}
    assert (
        _store(redis_client, keys).verify_user_token(jwt.encode(claims, SECRET, algorithm=ALGORITHM)) is None
    )
