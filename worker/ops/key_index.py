"""Each tenant's API keys indexed apart, and the cap on a tenant's active keys (``AGENT_SIGNAL_TENANT_MAX_KEYS``).

A hostile-caller walk: one tenant's admin key made 20,000 keys in a minute, each ~720 B of Redis kept for good and
counted by no quota, and another tenant's ``GET /v1/keys``, which read every tenant's keys to keep its own, went
from 4-13 ms to 344-553 ms. So a tenant's listing reads its own set (``Keys.api_keys_of``: every key id of the
tenant, revoked ones too), and a tenant holds at most ``tenant_max_keys`` keys not revoked
(``Keys.active_api_keys_of``; a revoke takes its key out): one more is refused, :class:`TooManyKeys`, which the door
answers ``429 quota_exceeded`` naming ``tenant``.

**Keys the index does not know** (made before it, or by code of before during an upgrade: a record and the global
set only) are found by count: every create here adds one to ``Keys.api_keys_indexed`` in the transaction that adds
its id to the global set, so the mark equals the global set's size while only this code made keys. A listing or
creation that finds them apart indexes every key again (each id's tenant and ``revokedAt`` read in one pipeline,
added to its sets with ``SADD``, so an id indexed twice is harmless), then sets the mark to the count it read.
A key revoked while that runs could be added to its active set after its revoke took it out: the keys added as
active are read again after the write, and a revoked one is taken out (a revoke that lands after that read takes
it out itself).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from redis import Redis, WatchError

from worker.intake.refusals import StoreUnavailable
from worker.keys.layout import Keys

__all__ = [
    "REVOKED_KEY_KEEP_S",
    "ROOM_ATTEMPTS",
    "TenantBeingDeleted",
    "TooManyKeys",
    "ensure_indexed",
    "forget_expired",
    "room_left",
    "stage_create",
    "stage_revoke",
    "tenant_key_ids",
]

# A revoked key's record (no secret hash: its tenant, role, name and times) is kept this long, then expires; its id
# stays in the global set (a few dozen bytes), which says "credentials are configured" (worker/ops/credentials.py).
# A walk saw one tenant make keys without end; a create-and-revoke loop kept ~720 B a pair for good before.
REVOKED_KEY_KEEP_S = 30 * 86_400
# WATCH transactions a create tries, each raced by another create of the tenant, before it gives up
ROOM_ATTEMPTS = 20


class TooManyKeys(ValueError):
    """The tenant holds ``tenant_max_keys`` keys not revoked already."""

    field = "tenant"

    def __init__(self, tenant: str, limit: int) -> None:
        super().__init__(
            f"tenant {tenant!r} holds {limit} keys that are not revoked, as many as AGENT_SIGNAL_TENANT_MAX_KEYS "
            "allows: revoke one first"
        )


class TenantBeingDeleted(ValueError):
    """The tenant is being deleted (worker/ops/tenant_deletion.py), or was deleted less than an hour ago: no key of
    it is made until then (a message of before, redelivered, could still arrive and run in the new tenant)."""

    field = "tenant"

    def __init__(self, tenant: str, reusable_at_ms: int | None = None) -> None:
        if reusable_at_ms is None:
            message = f"tenant {tenant!r} is being deleted: no key of it is made until the deletion is done"
        else:
            at = datetime.fromtimestamp(reusable_at_ms / 1000, UTC).isoformat(timespec="seconds")
            message = (
                f"tenant {tenant!r} was deleted; its name can be used again from {at} (work queued for it before "
                "could still arrive until then)"
            )
        super().__init__(message)


def _resting_until(client: Any, keys: Keys, tenant: str) -> int | None:
    """When a deleted tenant's name may be used again, if that is still to come (Redis's clock)."""
    raw = client.hget(keys.tenants_deleted, tenant)
    if raw is None:
        return None
    seconds, micros = client.time()
    return int(raw) if int(raw) > int(seconds) * 1000 + int(micros) // 1000 else None


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def ensure_indexed(client: Redis, keys: Keys) -> None:
    """Index every key again when some are not (the module docstring): one round trip when all are."""
    check = client.pipeline(transaction=False)
    check.scard(keys.api_keys)
    check.get(keys.api_keys_indexed)
    stored, indexed = check.execute()
    if indexed is not None and int(indexed) == int(stored):
        return
    ids = sorted(_text(i) for i in client.smembers(keys.api_keys))
    read = client.pipeline(transaction=False)
    for key_id in ids:
        read.hmget(keys.api_key(key_id), "tenant", "revokedAt")
    write = client.pipeline(transaction=False)
    active: list[tuple[str, str]] = []
    for key_id, (tenant, revoked) in zip(ids, read.execute(), strict=True):
        if tenant is None:
            continue
        write.sadd(keys.api_keys_of(_text(tenant)), key_id)
        if revoked is None:
            write.sadd(keys.active_api_keys_of(_text(tenant)), key_id)
            active.append((_text(tenant), key_id))
    write.set(keys.api_keys_indexed, len(ids))
    write.execute()
    again = client.pipeline(transaction=False)
    for _, key_id in active:
        again.hexists(keys.api_key(key_id), "revokedAt")
    fix = client.pipeline(transaction=False)
    for (tenant, key_id), revoked in zip(active, again.execute(), strict=True):
        if revoked:
            fix.srem(keys.active_api_keys_of(tenant), key_id)
    fix.execute()


def tenant_key_ids(client: Redis, keys: Keys, tenant: str) -> list[str]:
    """Every key id of ``tenant``, revoked ones too."""
    ensure_indexed(client, keys)
    return sorted(_text(i) for i in client.smembers(keys.api_keys_of(tenant)))


def room_left(client: Redis, keys: Keys, tenant: str, limit: int) -> None:
    """Raise :class:`TooManyKeys` when the tenant is at its limit already, :class:`TenantBeingDeleted` while it is
    being deleted (before anything is written or audited)."""
    if client.exists(keys.tenant_deletion(tenant)):
        raise TenantBeingDeleted(tenant)
    if (resting := _resting_until(client, keys, tenant)) is not None:
        raise TenantBeingDeleted(tenant, resting)
    ensure_indexed(client, keys)
    if limit and int(client.scard(keys.active_api_keys_of(tenant))) >= limit:
        raise TooManyKeys(tenant, limit)


def stage_create(
    client: Redis, keys: Keys, tenant: str, key_id: str, record: Mapping[str, str | int], limit: int
) -> None:
    """Write a new key's record and index it, in one transaction; with a ``limit``, only while the tenant holds
    fewer active keys (raises :class:`TooManyKeys`), checked under WATCH so that racing creates cannot both take
    the last room; never while the tenant is being deleted (:class:`TenantBeingDeleted`, watched too: a create
    racing the deletion's mark lands before it, and is revoked by it, or is refused). After :data:`ROOM_ATTEMPTS`
    races lost in a row nothing is written: StoreUnavailable (retry)."""
    active, deleting, tombstones = (
        keys.active_api_keys_of(tenant),
        keys.tenant_deletion(tenant),
        keys.tenants_deleted,
    )
    fields: dict[Any, Any] = dict(record)
    with client.pipeline(transaction=True) as pipe:
        for _ in range(ROOM_ATTEMPTS):
            try:
                watched = (active, deleting, tombstones) if limit else (deleting, tombstones)
                pipe.watch(*watched)  # type: ignore[no-untyped-call]
                if pipe.exists(deleting):
                    raise TenantBeingDeleted(tenant)
                if (resting := _resting_until(pipe, keys, tenant)) is not None:
                    raise TenantBeingDeleted(tenant, resting)
                if limit and int(pipe.scard(active)) >= limit:
                    raise TooManyKeys(tenant, limit)
                pipe.multi()
                pipe.hset(keys.api_key(key_id), mapping=fields)
                pipe.sadd(keys.api_keys, key_id)
                pipe.sadd(keys.api_keys_of(tenant), key_id)
                pipe.sadd(active, key_id)
                pipe.incr(keys.api_keys_indexed)
                pipe.hdel(
                    keys.tenants_deleted, tenant
                )  # a deleted tenant's name, used again: its own from now
                pipe.delete(keys.tenant_deleted(tenant))  # and a deletion of it starts over
                pipe.execute()
                return
            except WatchError:
                pipe.reset()
    raise StoreUnavailable(
        f"tenant {tenant!r} is creating many keys at once: no key was made, retry", retry_after_s=1
    )


def stage_revoke(pipe: Any, keys: Keys, tenant: str, key_id: str) -> None:
    """A revoke's part, in its transaction: the key no longer counts toward its tenant's active keys, and its record
    expires after :data:`REVOKED_KEY_KEEP_S`."""
    pipe.srem(keys.active_api_keys_of(tenant), key_id)
    pipe.expire(keys.api_key(key_id), REVOKED_KEY_KEEP_S)


def forget_expired(client: Redis, keys: Keys, tenant: str, key_ids: list[str]) -> None:
    """Take ids whose record is gone (revoked and expired) out of the tenant's index; the global set keeps them."""
    if key_ids:
        pipe = client.pipeline(transaction=True)
        pipe.srem(keys.api_keys_of(tenant), *key_ids)
        pipe.srem(keys.active_api_keys_of(tenant), *key_ids)
        pipe.execute()
