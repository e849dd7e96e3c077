"""The scope lease: at most one *effective* drainer per scope.

Why a lease and not a lock: a lock held by a paused or partitioned process blocks a scope forever, and an
unconditional ``DEL`` (LobeHub's release, quirk §11.10) can free somebody else's lock. A lease expires
(``SET NX PX`` with a random token), is renewed by a background thread every ``lease_renew_interval_s``
through a token-checked ``PEXPIRE``, and is released by a token-checked script. Every grant issues a
fencing number (``INCR fence:{scope}`` in the same script); each state write checks that the number is still
current, so a holder that was paused past its TTL cannot commit after somebody else took the scope
(Kleppmann's fencing tokens; the Redis docs' own advice). The lease is an efficiency device; the fence and
the idempotency lanes are the correctness device.

A renewal that finds the lease gone sets ``lost``; the pipeline checks it before every action and the
fenced scripts check the number at the write. The renewer never re-acquires an expired lease.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from redis.commands.core import Script

from worker.keys.layout import HOLDER_SEPARATOR, Keys
from worker.store.events import Head
from worker.store.scripts import Scripts, acquire_keys_of

__all__ = ["LeaseGrant", "ScopeLease"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class LeaseGrant:
    """A granted lease: token, fencing number, and the flag the renewer sets when it is lost."""

    scope_key: str
    token: str
    fence: int
    lost: threading.Event = field(default_factory=threading.Event)


class ScopeLease:
    """Acquire, renew (in a daemon thread) and release the lease of one scope."""

    def __init__(
        self,
        scripts: Scripts,
        keys: Keys,
        *,
        ttl_s: float,
        renew_interval_s: float,
        run: Callable[[Script, Sequence[str], Sequence[Any]], Any] | None = None,
    ) -> None:
        """``run`` runs ACQUIRE (``EventStore.durable``: waits for replicas when configured, so a fencing number
        a failover could hand out again is never used)."""
        self.scripts = scripts
        self.run = run
        self.keys = keys
        self.ttl_ms = int(ttl_s * 1000)
        self.renew_interval_s = renew_interval_s
        self._current: LeaseGrant | None = None
        self._guard = threading.Lock()
        self._thread: threading.Thread | None = None

    def acquire(
        self, scope_key: str, *, now_ms: int, holder: str = ""
    ) -> tuple[LeaseGrant | None, int, Head | None]:
        """Try once. Granted: (grant, 0, head), where the same round trip took the inbox's head (and, when the
        inbox was empty, already released the lease again: head.code == 0, no renewer started).
        Held by someone else: (None, milliseconds they still have, None). ``holder`` (the worker's node name)
        prefixes the lease token, so operators see who holds a scope (``holder|random``)."""
        token = f"{holder}{HOLDER_SEPARATOR}{secrets.token_hex(12)}" if holder else secrets.token_hex(16)
        k = self.keys.for_scope(scope_key)  # with scope buckets: the scope's bucket's indexes
        keys = [k.lease(scope_key), k.fence(scope_key), k.inbox(scope_key), k.scheduled(scope_key), k.scopes]
        keys += self.scripts.acquire_keys or acquire_keys_of(k)
        args: list[str | int] = [token, self.ttl_ms, k.event_prefix, now_ms, k.scope_ref(scope_key)]
        if self.run is None:
            reply = self.scripts.acquire_script(keys=keys, args=args)
        else:
            reply = self.run(self.scripts.acquire_script, keys, args)
        fence = int(reply[0])
        if fence == 0:
            return None, max(int(reply[1]), 0), None
        grant = LeaseGrant(scope_key=scope_key, token=token, fence=fence)
        head = Head.parse(reply[1:-1])
        if head.code == 1:
            head = replace(head, behind=max(int(reply[-1]) - 1, 0))
        if head.code != 0:
            self._start_renewer(grant)
        return grant, 0, head

    def renew(self, grant: LeaseGrant) -> bool:
        ok = bool(
            int(self.scripts.renew(keys=[self.keys.lease(grant.scope_key)], args=[grant.token, self.ttl_ms]))
        )
        if not ok:
            grant.lost.set()
        return ok

    def _start_renewer(self, grant: LeaseGrant) -> None:
        """Make ``grant`` the one the process's renewer thread keeps alive (one thread per process, started on
        first use: a drain holds one lease at a time, and a thread per drain costs more than the drain)."""
        with self._guard:
            self._current = grant
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._renew_forever, name="lease-renewer", daemon=True)
                self._thread.start()

    def _renew_forever(self) -> None:
        # Renews at most renew_interval_s after a grant and then every renew_interval_s; a grant taken just
        # before a tick is renewed early, which is harmless.
        while True:
            time.sleep(self.renew_interval_s)
            with self._guard:
                grant = self._current
            if grant is None or grant.lost.is_set():
                continue
            try:
                if not self.renew(grant):
                    log.warning("lease lost", extra={"scopeKey": grant.scope_key, "fence": grant.fence})
            except Exception:  # a Redis hiccup: try again next tick; the TTL covers two misses
                log.exception("lease renewal failed")

    def stop_renewing(self) -> None:
        with self._guard:
            self._current = None

    def hand_off(self, grant: LeaseGrant) -> bool:
        """Token-checked release that keeps the scope scheduled; False when another holder owns the lease."""
        return int(self.scripts.release(keys=[self.keys.lease(grant.scope_key)], args=[grant.token])) == 1
