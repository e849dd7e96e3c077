"""What an erasure holds while it runs (worker/ops/erasure.py): its tenant's erasure lock and its scopes' leases.

* **The tenant's lock** (``Keys.erasure_lock``, ``SET NX PX`` with the erasure's token): one erasure at a time per
  tenant. An erasure walks the keyspace (SCANs of the tenant's families); concurrent ones of one tenant multiplied
  that walk and held a connection each, so another tenant's reads slowed and the web's pool ran dry. A second
  erasure of the tenant while one runs raises :class:`ErasureRunning` (the door answers 429 with
  ``Retry-After``); another tenant's is not blocked. The lock lives :attr:`ErasureHolds.ttl_ms` and is renewed with
  the leases: an erasure whose process dies releases nothing, and its lock expires then.
* **Each scope's lease**, taken with the erasure's own token (ERASE_HOLD: a new fencing number, so a drain whose
  lease ran out earlier cannot write after us) and held until the scope's part and the plugins' parts are done.
  A scope whose lease a drain (or another erasure) holds is busy.

Both are renewed (token-checked) when a third of their TTL has passed (:meth:`ErasureHolds.keep_alive`, called
between steps and inside long SCANs) and released (token-checked) at the end.
"""

from __future__ import annotations

import logging
import math
import secrets
import time
from collections.abc import Iterable

from worker.keys.layout import HOLDER_SEPARATOR, Keys
from worker.store.calls import EraseHold, Release, Renew
from worker.store.events import EventStore

__all__ = ["HOLDER", "HOLD_MIN_S", "ErasureHolds", "ErasureRunning"]

HOLDER = "erasure"  # the holder a scope's lease names while an erasure holds it (scopes list, workers view)
# The erasure's leases (and its tenant's lock) live at least this long between renewals (a drain's lease TTL when
# longer): it renews them between steps, and one step (a SCAN of a large keyspace) may take a while. A crashed
# erasure holds its scopes, and its tenant's lock, this long at most; a drain that finds one held comes back when
# it ends.
HOLD_MIN_S = 10.0
log = logging.getLogger(__name__)


class ErasureRunning(Exception):
    """Another erasure of the tenant holds its lock: try again in ``retry_after_s`` (whole seconds, ≥ 1)."""

    def __init__(self, retry_after_s: int) -> None:
        super().__init__(f"an erasure of this tenant is running; retry in {retry_after_s}s")
        self.retry_after_s = retry_after_s


class ErasureHolds:
    """The tenant lock and the scope leases one erasure holds (one token for all of them)."""

    def __init__(self, store: EventStore, tenant: Keys, busy: list[str]) -> None:
        self.store, self.tenant = store, tenant
        self.token = f"{HOLDER}{HOLDER_SEPARATOR}{secrets.token_hex(12)}"
        self.ttl_ms = int(max(store.settings.lease_ttl_s, HOLD_MIN_S) * 1000)
        self.held: list[str] = []
        self.busy = busy  # scopes found held by someone else, or whose lease was lost (the report's list)
        self.locked = False
        self._renewed = time.monotonic()

    def lock(self) -> None:
        """Take the tenant's erasure lock; raises :class:`ErasureRunning` when another erasure holds it. A lock
        released between the SET and the read of its TTL (-2: no key) is asked for once more."""
        client = self.store.client
        for _ in range(2):
            if client.set(self.tenant.erasure_lock, self.token, nx=True, px=self.ttl_ms):
                self.locked = True
                self._renewed = time.monotonic()
                return
            # what the holder has left (-1, no TTL, is never written; -2 again: 1 s): a whole second at least
            left_ms = int(client.pttl(self.tenant.erasure_lock))
            if left_ms != -2:
                break
        raise ErasureRunning(max(1, math.ceil(left_ms / 1000)))

    def lease(self, scope: str) -> str:
        return self.tenant.for_scope(scope).lease(scope)

    def take(self, scopes: Iterable[str]) -> None:
        """Hold each scope's lease; one a drain (or another erasure) holds is busy."""
        for scope in sorted(scopes):
            k = self.tenant.for_scope(scope)
            reply = self.store.durable(EraseHold(k.lease(scope), k.fence(scope), self.token, self.ttl_ms))
            if int(reply[0]) == 1:
                self.held.append(scope)
            else:
                self.busy.append(scope)
            self.keep_alive()

    def keep_alive(self) -> None:
        """Renew the lock and the leases held when a third of their TTL has passed since the last renewal; a lease
        found gone (we were paused past its TTL) is busy: someone may hold it now. A lock found gone is logged: the
        erasure goes on (its scopes' leases still fence it), and another of the tenant may run beside it."""
        if time.monotonic() - self._renewed < self.ttl_ms / 3000:
            return
        self._renewed = time.monotonic()
        scripts = self.store.scripts
        if self.locked and not int(scripts.run(Renew(self.tenant.erasure_lock, self.token, self.ttl_ms))):
            self.locked = False
            log.warning(
                "erasure: the tenant's erasure lock expired while it ran (paused past %d ms)", self.ttl_ms
            )
        for scope in list(self.held):
            if not int(scripts.run(Renew(self.lease(scope), self.token, self.ttl_ms))):
                self.lose(scope)

    def lose(self, scope: str) -> None:
        self.held.remove(scope)
        self.busy.append(scope)

    def release(self) -> None:
        """Release the scopes' leases (token-checked)."""
        for scope in self.held:
            self.store.scripts.run(Release(self.lease(scope), self.token))
        self.held = []

    def unlock(self) -> None:
        """Release the tenant's lock (token-checked: one that expired and another erasure took stays theirs)."""
        if self.locked:
            self.store.scripts.run(Release(self.tenant.erasure_lock, self.token))
            self.locked = False
