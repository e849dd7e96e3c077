"""Each tenant's API keys indexed apart, and the cap on a tenant's active keys (``AGENT_SIGNAL_TENANT_MAX_KEYS``).

A hostile-caller walk: one tenant's admin key made 20,000 keys in a minute, each ~720 B of Redis kept for good and
counted by no quota, and another tenant's ``GET /v1/keys``, which read every tenant's keys to keep its own, went
from 4-13 ms to 344-553 ms. So a tenant's listing reads its own set (``Keys.api_keys_of``: every key id of the
tenant, revoked ones too), and a tenant holds at most ``tenant_max_keys`` keys not revoked
(``Keys.active_api_keys_of``; a revoke takes its key out): one more is refused, :class:`TooManyKeys`, which the door
answers ``429 quota_exceeded`` naming ``tenant``.

Keys made before the indexes are added to them once, by the first listing or creation that finds the mark
(``Keys.api_keys_indexed``) missing: every key's tenant and ``revokedAt`` read in one pipeline, each id added to
its sets, then the mark set. Adding is ``SADD``, so a key made meanwhile (which adds itself) is added twice
harmlessly, and a key revoked meanwhile (which takes itself out of its active set first) may be counted active
until the next revoke of it: an overcount of one key, never a key listed under another tenant.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from redis import Redis, WatchError

from worker.keys.layout import Keys

__all__ = [
    "ROOM_ATTEMPTS",
    "TooManyKeys",
    "ensure_indexed",
    "room_left",
    "stage_create",
    "stage_revoke",
    "tenant_key_ids",
]

ROOM_ATTEMPTS = (
    5  # WATCH transactions a create tries, each raced by another create of the tenant, before it gives up
)


class TooManyKeys(ValueError):
    """The tenant holds ``tenant_max_keys`` keys not revoked already."""

    field = "tenant"

    def __init__(self, tenant: str, limit: int) -> None:
        super().__init__(
            f"tenant {tenant!r} holds {limit} keys that are not revoked, as many as AGENT_SIGNAL_TENANT_MAX_KEYS "
            "allows: revoke one first"
        )


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def ensure_indexed(client: Redis, keys: Keys) -> None:
    """Add the keys made before the tenant indexes to them, once (the module docstring)."""
    if client.exists(keys.api_keys_indexed):
        return
    ids = sorted(_text(i) for i in client.smembers(keys.api_keys))
    read = client.pipeline(transaction=False)
    for key_id in ids:
        read.hmget(keys.api_key(key_id), "tenant", "revokedAt")
    write = client.pipeline(transaction=False)
    for key_id, (tenant, revoked) in zip(ids, read.execute(), strict=True):
        if tenant is None:
            continue
        write.sadd(keys.api_keys_of(_text(tenant)), key_id)
        if revoked is None:
            write.sadd(keys.active_api_keys_of(_text(tenant)), key_id)
    write.set(keys.api_keys_indexed, "1")
    write.execute()


def tenant_key_ids(client: Redis, keys: Keys, tenant: str) -> list[str]:
    """Every key id of ``tenant``, revoked ones too."""
    ensure_indexed(client, keys)
    return sorted(_text(i) for i in client.smembers(keys.api_keys_of(tenant)))


def stage_create(
    client: Redis, keys: Keys, tenant: str, key_id: str, record: Mapping[str, str | int], limit: int
) -> None:
    """Write a new key's record and index it, in one transaction; with a ``limit``, only while the tenant holds
    fewer active keys (raises :class:`TooManyKeys`), checked under WATCH so that racing creates cannot both take
    the last room (after :data:`ROOM_ATTEMPTS` races in a row, the last try checks without it: a tenant that busy
    may end a few keys over)."""
    ensure_indexed(client, keys)
    active = keys.active_api_keys_of(tenant)
    with client.pipeline(transaction=True) as pipe:
        for attempt in range(ROOM_ATTEMPTS):
            watched = limit > 0 and attempt < ROOM_ATTEMPTS - 1  # the last try checks without a watch
            try:
                if watched:
                    pipe.watch(active)  # type: ignore[no-untyped-call]
                if limit and int((pipe if watched else client).scard(active)) >= limit:
                    raise TooManyKeys(tenant, limit)
                pipe.multi()
                fields: dict[Any, Any] = dict(record)
                pipe.hset(keys.api_key(key_id), mapping=fields)
                pipe.sadd(keys.api_keys, key_id)
                pipe.sadd(keys.api_keys_of(tenant), key_id)
                pipe.sadd(active, key_id)
                pipe.execute()
                return
            except WatchError:
                pipe.reset()


def room_left(client: Redis, keys: Keys, tenant: str, limit: int) -> None:
    """Raise :class:`TooManyKeys` when the tenant is at its limit already (before anything is written or audited)."""
    if limit:
        ensure_indexed(client, keys)
        if int(client.scard(keys.active_api_keys_of(tenant))) >= limit:
            raise TooManyKeys(tenant, limit)


def stage_revoke(pipe: Any, keys: Keys, tenant: str, key_id: str) -> None:
    """A revoke's part, in its transaction: the key no longer counts toward its tenant's active keys."""
    pipe.srem(keys.active_api_keys_of(tenant), key_id)
