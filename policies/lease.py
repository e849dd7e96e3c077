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
from dataclasses import dataclass, field

from worker.keys import Keys
from worker.scripts import Scripts

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

    def __init__(self, scripts: Scripts, keys: Keys, *, ttl_s: float, renew_interval_s: float) -> None:
        self.scripts = scripts
        self.keys = keys
        self.ttl_ms = int(ttl_s * 1000)
        self.renew_interval_s = renew_interval_s
        self._stop: threading.Event | None = None
        self._thread: threading.Thread | None = None

    def acquire(self, scope_key: str) -> tuple[LeaseGrant | None, int]:
        """Try once: (grant, 0) on success, else (None, milliseconds the current holder still has)."""
        token = secrets.token_hex(16)
        reply = int(
            self.scripts.acquire(
                keys=[self.keys.lease(scope_key), self.keys.fence(scope_key)], args=[token, self.ttl_ms]
            )
        )
        if reply > 0:
            grant = LeaseGrant(scope_key=scope_key, token=token, fence=reply)
            self._start_renewer(grant)
            return grant, 0
        return None, max(-reply, 0)

    def renew(self, grant: LeaseGrant) -> bool:
        ok = bool(
            int(self.scripts.renew(keys=[self.keys.lease(grant.scope_key)], args=[grant.token, self.ttl_ms]))
        )
        if not ok:
            grant.lost.set()
        return ok

    def _start_renewer(self, grant: LeaseGrant) -> None:
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(self.renew_interval_s):
                try:
                    if not self.renew(grant):
                        log.warning("lease lost", extra={"scopeKey": grant.scope_key, "fence": grant.fence})
                        return
                except Exception:  # a Redis hiccup: try again next tick; the TTL covers two misses
                    log.exception("lease renewal failed")

        self._stop = stop
        self._thread = threading.Thread(target=loop, name=f"lease-renew:{grant.scope_key}", daemon=True)
        self._thread.start()

    def stop_renewing(self) -> None:
        if self._stop is not None:
            self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.renew_interval_s + 1)
        self._stop = None
        self._thread = None

    def release(self, grant: LeaseGrant, *, handoff: bool = False) -> int:
        """Token-checked release; see ``scripts.RELEASE`` for the reply codes (0 means: still ours, keep going)."""
        reply = int(
            self.scripts.release(
                keys=[
                    self.keys.lease(grant.scope_key),
                    self.keys.inbox(grant.scope_key),
                    self.keys.scheduled(grant.scope_key),
                    self.keys.scopes,
                ],
                args=[grant.token, grant.scope_key, "handoff" if handoff else "normal"],
            )
        )
        return reply
