"""Deleted tenants, as each process sees them: work already on its way for one (a drain message on the broker, a
retry's delayed drain, a plugin task such as an agent run, a journal or outbox record a relay reads, a scope the
reconcile sweep finds, an admission by a plugin) is dropped instead of writing the tenant back after its deletion
(worker/ops/tenant_deletion.py; a review found an agent run queued before a deletion bring 18 of its keys back).

The set is ``Keys.tenants_deleted`` (written by the deletion's first call, kept after it is done, taken out by a key
made for the name again), read whole at most every :data:`REFRESH_S` per process: one ``HKEYS`` of a few names, so
the check of a live tenant (each admission, each drain) is a set lookup. A name found there is confirmed with one
``HEXISTS`` before its work is dropped (a review: a name used again was refused, and its drains dropped, by a cache
up to 2 s old). A store error never drops work: the last answer stands, and a name it cannot confirm is taken as
not deleted (its work then meets the store's error, and is retried, as it would have been).
"""

from __future__ import annotations

import time

from redis import Redis, RedisError

from worker.keys.engine import EngineWide

__all__ = ["REFRESH_S", "DeletedTenants"]

REFRESH_S = 2.0


class DeletedTenants:
    """``deleted(tenant)``: the cached set for a live tenant, confirmed in the store for a deleted one."""

    def __init__(self, client: Redis, keys: EngineWide, refresh_s: float = REFRESH_S) -> None:
        self.client, self.key, self.refresh_s = client, keys.tenants_deleted, refresh_s
        self._names: frozenset[str] = frozenset()
        self._until = 0.0

    def deleted(self, tenant: str) -> bool:
        if time.monotonic() >= self._until:
            self._refresh()
        if tenant not in self._names:
            return False
        try:
            return bool(self.client.hexists(self.key, tenant))
        except RedisError:
            return False

    def _refresh(self) -> None:
        self._until = time.monotonic() + self.refresh_s
        try:
            self._names = frozenset(str(n) for n in self.client.hkeys(self.key))
        except RedisError:
            pass  # the last answer stands until the next refresh
