"""Erased users' token floors (worker/ops/credentials.py ``end_user_tokens``), on a real Redis.

A review of the first version: each user's floor was its own key, cached per user, so each user's first request
in each cache window left the event loop for a GET (and the cache, dropped whole at 10,000 users, thrashed); a
verification that read the floor before this process wrote it could cache the absent floor after, so the process
that erased the user forgot it for a window; and a token minted in the floor's own ms passed. Now a tenant's floors
are one hash read once per cache window, a refresh never lowers a floor this process wrote, and the floor is one
ms past the Redis clock's now.

A second review: the hash grows with every user id erased (random ids, a bulk erasure), and read whole (HGETALL)
at 200,000 fields it cost every web process half a second per window; and the erasure's WATCH loop had no bound.
Now a hash past FLOORS_READ_WHOLE_MAX_FIELDS is never read whole (each user's field alone, per window), and the
floor's write gives up after FLOOR_WRITE_ATTEMPTS raced tries (503 store_unavailable)."""

from __future__ import annotations

from typing import Any

import pytest
from redis import Redis

from worker.intake.source_event import StoreUnavailable
from worker.keys.layout import Keys
from worker.ops.credentials import (
    ERASED_TOKENS_TTL_S,
    FLOOR_WRITE_ATTEMPTS,
    FLOORS_READ_WHOLE_MAX_FIELDS,
    CredentialStore,
    NeedsIO,
    UserErased,
)

BOOT = "bootstrap-key-for-token-floors-0123456789"
SECRET = "token-secret-for-token-floors-0123456789abcdef"
TENANT = "default"  # the bootstrap key's tenant: its tokens need no stored key
CACHE_S = 60.0


def _store(redis_client: Redis, prefix: str) -> CredentialStore:
    """One web process's credentials (a cache window long enough for the test)."""
    return CredentialStore(
        redis_client, Keys(prefix), bootstrap_key=BOOT, token_secret=SECRET, cache_s=CACHE_S
    )


def _floors_key(prefix: str) -> str:
    return Keys(prefix).for_tenant(TENANT).tokens_from


def test_one_read_of_the_tenants_floors_serves_every_user_without_io(
    redis_client: Redis, prefix: str
) -> None:
    """After one read of the tenant's hash, every user's token verifies on the event loop (``allow_io=False``)
    with no NeedsIO: an erased user's is refused, the others pass. Before, each user's first token in each
    window raised NeedsIO and cost a GET of its own."""
    other_process = _store(redis_client, prefix)
    erased_token, _ = other_process.mint_user_token(TENANT, "erased")
    other_process.end_user_tokens(TENANT, "erased")
    store = _store(redis_client, prefix)
    tokens = [store.mint_user_token(TENANT, f"user-{n}")[0] for n in range(50)]

    with pytest.raises(NeedsIO):
        store.check_user_token(tokens[0], allow_io=False)
    assert store.check_user_token(tokens[0]) is not None  # the one read, off the loop
    assert all(store.check_user_token(t, allow_io=False) is not None for t in tokens)
    with pytest.raises(UserErased):
        store.check_user_token(erased_token, allow_io=False)


def test_a_tenant_with_no_floor_costs_no_digest_per_user(
    redis_client: Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the tenant's hash empty (no erasure within a day: the common case) a token's check computes no
    user digest: one read per tenant and window, nothing per user."""
    store = _store(redis_client, prefix)
    token, _ = store.mint_user_token(TENANT, "alice")
    assert store.check_user_token(token) is not None

    def no_digest(user_id: str) -> str:
        raise AssertionError(f"a digest of {user_id!r} was computed with no floor in the tenant")

    monkeypatch.setattr(store, "user_ref", no_digest)
    assert store.check_user_token(token, allow_io=False) is not None


def test_a_refresh_that_read_before_the_erasure_cannot_lower_this_processs_floor(
    redis_client: Redis, prefix: str
) -> None:
    """The interleaving the review found, step by step: a verification reads the tenant's floors (none), this
    process erases the user (writes the floor), then the verification caches what it read. The process still
    refuses the user's old token at once, not only after the window."""
    store = _store(redis_client, prefix)
    token, _ = store.mint_user_token(TENANT, "alice")

    stale = store._read_floors(TENANT)  # a verification in the threadpool reads...
    assert stale == {}
    store.end_user_tokens(TENANT, "alice")  # ...the erasure writes the floor...
    store._cache_floors(TENANT, stale)  # ...and the verification caches what it read

    with pytest.raises(UserErased):
        store.check_user_token(token, allow_io=False)


def test_a_stale_refresh_cached_before_the_floor_is_remembered_is_raised_to_it(
    redis_client: Redis, prefix: str
) -> None:
    """The other order: the stale read is cached between the erasure's write to Redis and the process noting the
    floor; noting it raises the cached floors too."""
    store = _store(redis_client, prefix)
    token, _ = store.mint_user_token(TENANT, "alice")
    stale = store._read_floors(TENANT)
    floor_ms = store.server_ms() + 1

    store._cache_floors(TENANT, stale)
    store._remember_written(TENANT, store.user_ref("alice"), floor_ms)

    with pytest.raises(UserErased):
        store.check_user_token(token, allow_io=False)


def test_a_token_minted_in_the_floors_own_millisecond_is_refused(
    redis_client: Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The floor is one ms past the Redis clock's now: a token minted before the erasure in that same ms (its
    ``iatMs`` equal to the clock's reading) is issued before the floor."""
    store = _store(redis_client, prefix)
    now_ms = store.server_ms()
    monkeypatch.setattr(store, "server_ms", lambda: now_ms)
    token, _ = store.mint_user_token(TENANT, "alice")

    floor_ms = store.end_user_tokens(TENANT, "alice")
    with pytest.raises(UserErased):
        store.check_user_token(token)
    assert floor_ms == now_ms + 1


def test_a_floor_write_prunes_floors_past_a_tokens_lifetime_and_sets_the_ttl_again(
    redis_client: Redis, prefix: str
) -> None:
    """Each erasure sets the hash's TTL to ERASED_TOKENS_TTL_S again and drops the floors older than that (every
    token issued before them has expired); younger floors stay."""
    store = _store(redis_client, prefix)
    key, now_ms = _floors_key(prefix), store.server_ms()
    old_ms, young_ms = now_ms - ERASED_TOKENS_TTL_S * 1000 - 1000, now_ms - 1000
    redis_client.hset(key, mapping={"old-ref": old_ms, "young-ref": young_ms})
    redis_client.expire(key, 5)

    floor_ms = store.end_user_tokens(TENANT, "alice")

    assert redis_client.hgetall(key) == {"young-ref": str(young_ms), store.user_ref("alice"): str(floor_ms)}
    assert ERASED_TOKENS_TTL_S - 5 <= redis_client.ttl(key) <= ERASED_TOKENS_TTL_S


def test_a_floor_never_goes_down(redis_client: Redis, prefix: str) -> None:
    """A user's stored floor higher than the clock's now (written by another erasure) is kept, and returned."""
    store = _store(redis_client, prefix)
    ahead_ms = store.server_ms() + 600_000
    redis_client.hset(_floors_key(prefix), store.user_ref("alice"), ahead_ms)

    assert store.end_user_tokens(TENANT, "alice") == ahead_ms
    assert redis_client.hget(_floors_key(prefix), store.user_ref("alice")) == str(ahead_ms)


def test_the_floors_hash_is_the_engines_and_names_no_user(redis_client: Redis, prefix: str) -> None:
    """A handler's staged write to the tenant's floors is refused (an engine key), and the hash holds digests,
    never the user id."""
    tenant = Keys(prefix).for_tenant(TENANT)
    assert tenant.is_engine_key(tenant.tokens_from)
    _store(redis_client, prefix).end_user_tokens(TENANT, "alice")
    assert "alice" not in "".join(redis_client.hkeys(tenant.tokens_from))


def _fill_floors(redis_client: Redis, prefix: str, count: int) -> None:
    """``count`` other users' floors, young (an erasure prunes none of them)."""
    seconds, _ = redis_client.time()
    redis_client.hset(_floors_key(prefix), mapping={f"ref-{n}": int(seconds) * 1000 for n in range(count)})


def _count_hgetall(redis_client: Redis, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The keys the client reads whole from now on (a thin wrapper of its HGETALL)."""
    calls: list[str] = []
    real = redis_client.hgetall

    def hgetall(name: str) -> Any:
        calls.append(name)
        return real(name)

    monkeypatch.setattr(redis_client, "hgetall", hgetall)
    return calls


def test_a_tenant_with_too_many_floors_to_read_whole_reads_each_users_field_alone(
    redis_client: Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past FLOORS_READ_WHOLE_MAX_FIELDS floors the hash is never read whole: an erased user's old token is still
    refused (its field read alone, once per window: then on the event loop), another user's passes. Before, every
    web process read every field once per window (200,000 fields: 0.5 s)."""
    _fill_floors(redis_client, prefix, FLOORS_READ_WHOLE_MAX_FIELDS + 1)
    other_process = _store(redis_client, prefix)
    erased_token, _ = other_process.mint_user_token(TENANT, "erased")
    kept_token, _ = other_process.mint_user_token(TENANT, "kept")
    other_process.end_user_tokens(TENANT, "erased")
    store = _store(redis_client, prefix)
    whole_reads = _count_hgetall(redis_client, monkeypatch)

    with pytest.raises(UserErased):
        store.check_user_token(erased_token)
    assert store.check_user_token(kept_token) is not None
    with pytest.raises(UserErased):
        store.check_user_token(erased_token, allow_io=False)  # this user's field, cached for the window
    assert store.check_user_token(kept_token, allow_io=False) is not None
    assert whole_reads == []


def test_a_tenant_with_few_floors_is_still_read_whole_once_per_window(
    redis_client: Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Up to FLOORS_READ_WHOLE_MAX_FIELDS floors the hash is read whole once per window, and every user of the
    tenant is then looked up in the process (no read per user): the old path, kept for the common sizes."""
    _fill_floors(redis_client, prefix, FLOORS_READ_WHOLE_MAX_FIELDS - 1)
    other_process = _store(redis_client, prefix)
    erased_token, _ = other_process.mint_user_token(TENANT, "erased")
    other_process.end_user_tokens(TENANT, "erased")
    store = _store(redis_client, prefix)
    tokens = [store.mint_user_token(TENANT, f"user-{n}")[0] for n in range(5)]
    whole_reads = _count_hgetall(redis_client, monkeypatch)

    with pytest.raises(UserErased):
        store.check_user_token(erased_token)
    assert all(store.check_user_token(t, allow_io=False) is not None for t in tokens)
    assert whole_reads == [_floors_key(prefix)]


def test_a_users_field_read_before_this_process_erased_them_does_not_lower_its_floor(
    redis_client: Redis, prefix: str
) -> None:
    """Past FLOORS_READ_WHOLE_MAX_FIELDS floors too, the process that erased the user refuses the old token at once:
    the user's field cached (absent) before the erasure is raised to the floor this process wrote."""
    _fill_floors(redis_client, prefix, FLOORS_READ_WHOLE_MAX_FIELDS + 1)
    store = _store(redis_client, prefix)
    token, _ = store.mint_user_token(TENANT, "alice")
    assert store.check_user_token(token) is not None  # caches alice's field: absent

    store.end_user_tokens(TENANT, "alice")
    with pytest.raises(UserErased):
        store.check_user_token(token, allow_io=False)


def test_a_floor_write_raced_on_every_attempt_gives_up_as_store_unavailable(
    redis_client: Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another write to the tenant's floors between each WATCH and its EXEC (a real race, every time): the erasure
    stops after FLOOR_WRITE_ATTEMPTS tries with the error the door answers 503 store_unavailable, naming what failed.
    Before, it looped for as long as the races lasted."""
    store = _store(redis_client, prefix)
    key, attempts = _floors_key(prefix), []
    real_pipeline = redis_client.pipeline

    def racing_pipeline(*args: Any, **kwargs: Any) -> Any:
        pipe = real_pipeline(*args, **kwargs)
        real_execute = pipe.execute

        def execute(*a: Any, **k: Any) -> Any:
            attempts.append(1)
            redis_client.hset(key, f"racer-{len(attempts)}", 1)  # another connection writes the watched key
            return real_execute(*a, **k)

        pipe.execute = execute  # type: ignore[method-assign]
        return pipe

    monkeypatch.setattr(redis_client, "pipeline", racing_pipeline)
    with pytest.raises(StoreUnavailable, match="token floor was not written"):
        store.end_user_tokens(TENANT, "alice")
    assert len(attempts) == FLOOR_WRITE_ATTEMPTS
    assert redis_client.hget(key, store.user_ref("alice")) is None
