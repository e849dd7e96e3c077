"""A stream's credential, checked again while the stream is open.

The auth middleware (producers/http/access/auth.py) verifies a request's credential once, when it arrives; a receipts
stream lasts hours. So the stream re-resolves its bearer with the middleware's own cached lookup
(:meth:`~producers.http.access.auth.Authenticator.resolve`) every :func:`recheck_interval_s` (the auth cache window,
``AGENT_SIGNAL_AUTH_CACHE_S``, at least :data:`RECHECK_MIN_S` and at most the keep-alive interval), and the
stream ends when the bearer no longer resolves to the principal that opened it (a revoked key, a token whose
issuing key was revoked, credentials configured since a local stream opened). A user token's stream also ends
at the token's ``exp``. A check that cannot reach the store is tried again at the next interval; after
:data:`UNVERIFIED_MAX_S` without a successful one the stream ends (a reconnect meets the door's 503).
"""

from __future__ import annotations

import logging
import time
from typing import Final

from fastapi import Request
from redis.exceptions import RedisError

from producers.http.access.auth import Authenticator
from producers.http.access.principal import Principal, Unauthenticated
from producers.http.access.throttle import Throttled
from worker.core.clock import now_ms

__all__ = ["RECHECK_MIN_S", "UNVERIFIED_MAX_S", "StreamCredential", "recheck_interval_s", "stream_credential"]

log = logging.getLogger(__name__)

RECHECK_MIN_S: Final = (
    1.0  # never more often than this, whatever the auth cache window (0 turns the cache off)
)
UNVERIFIED_MAX_S: Final = 30.0  # how long a stream outlives checks that could not reach the store


def recheck_interval_s(auth_cache_s: float, ping_s: float) -> float:
    """How often a stream's credential is checked: the auth cache window, within [RECHECK_MIN_S, ping_s]."""
    return min(ping_s, max(auth_cache_s, RECHECK_MIN_S))


class StreamCredential:
    """The bearer of an open stream and the principal it resolved to when the stream opened."""

    def __init__(
        self,
        auth: Authenticator,
        bearer: str | None,
        principal: Principal,
        interval_s: float,
        expires_at_ms: int | None = None,
    ) -> None:
        self.auth = auth
        self.bearer = bearer
        self.principal = principal
        self.interval_s = interval_s
        self.expires_at_ms = expires_at_ms
        now = time.monotonic()
        self._due = now + interval_s
        self._verified = now

    def wait_s(self) -> float:
        """Seconds until the next check is due (or the token expires, when sooner)."""
        wait = self._due - time.monotonic()
        if self.expires_at_ms is not None:
            wait = min(wait, (self.expires_at_ms - now_ms()) / 1000)
        return max(wait, 0.0)

    async def still_valid(self) -> bool:
        """False once the credential has failed a check or expired; a check runs only when it is due."""
        if self.expires_at_ms is not None and now_ms() >= self.expires_at_ms:
            return False
        now = time.monotonic()
        if now < self._due:
            return True
        self._due = now + self.interval_s
        try:
            resolved = await self.auth.resolve(self.bearer)
        except Unauthenticated:
            return False
        except (RedisError, Throttled) as exc:  # not verified, not refused either: try again next interval
            log.warning("receipts stream: credential not re-checked (%s)", type(exc).__name__)
            return now - self._verified < UNVERIFIED_MAX_S
        if resolved != self.principal:
            return False
        self._verified = now
        return True


def _bearer_of(request: Request) -> str | None:
    """The credential of ``Authorization: Bearer …`` (the middleware admitted the request, so it is well formed)."""
    header = request.headers.get("authorization")
    if header is None:
        return None
    return header.strip().partition(" ")[2].strip() or None


def stream_credential(request: Request, principal: Principal, ping_s: float) -> StreamCredential:
    """The credential of the stream ``request`` opens, resolved to ``principal`` by the middleware (call it from
    a plain ``def`` route: a user token's ``exp`` is read with the middleware's verification, which may read
    Redis when its cache has expired)."""
    auth: Authenticator = request.app.state.auth
    bearer = _bearer_of(request)
    token = auth.store.verify_user_token(bearer) if principal.is_user and bearer else None
    expires_at_ms = None if token is None else token.expires_at_ms
    interval_s = recheck_interval_s(auth.door.auth_cache_s, ping_s)
    return StreamCredential(auth, bearer, principal, interval_s, expires_at_ms)
