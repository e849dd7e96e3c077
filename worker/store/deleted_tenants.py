"""Deleted tenants, as each process sees them: work already on its way for one (a drain message on the broker, a
retry's delayed drain, a plugin task such as an agent run, a journal or outbox record a relay reads, a scope the
reconcile sweep finds, an admission by a plugin) is dropped instead of writing the tenant back after its deletion
(worker/ops/tenant_deletion.py; a review found an agent run queued before a deletion bring 18 of its keys back).

The set is ``Keys.tenants_deleted`` (written by the deletion's first call, kept after it is done, taken out by a key
made for the name again), read whole at most every :data:`REFRESH_S` per process: one ``HKEYS`` of a few names, so
the checks on the hot path (each admission, each drain) are a set lookup.
"""

from __future__ import annotations

import threading
import time

from redis import Redis

from worker.keys.engine import EngineWide

__all__ = ["REFRESH_S", "DeletedTenants"]

REFRESH_S = 2.0


class DeletedTenants:
    """``deleted(tenant)``, read through a cache of :data:`REFRESH_S` (a store error propagates: the work that
    asked would have met it too)."""

    def __init__(self, client: Redis, keys: EngineWide, refresh_s: float = REFRESH_S) -> None:
        self.client, self.key, self.refresh_s = client, keys.tenants_deleted, refresh_s
        self._names: frozenset[str] = frozenset()
        self._until = 0.0
        self._lock = threading.Lock()

    def deleted(self, tenant: str) -> bool:
        if time.monotonic() >= self._until:
            self._refresh()
        return tenant in self._names

    def _refresh(self) -> None:
        names = frozenset(str(n) for n in self.client.hkeys(self.key))
        with self._lock:
            self._names, self._until = names, time.monotonic() + self.refresh_s
