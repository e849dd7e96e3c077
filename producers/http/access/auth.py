"""The front door's authentication: ``install_auth(app, settings, door)``.

A pure ASGI middleware resolves ``Authorization: Bearer …`` once per request into a
:class:`~producers.http.access.principal.Principal` on ``request.state.principal`` (``scope["state"]``) and charges the
credential's rate bucket; routes declare what they need with ``Depends(require(GRANT))``. What a bearer may be:
the bootstrap key, an API key (``as_…``) or a user token (a JWT); see worker/ops/credentials.py.

* No credential configured at all (no bootstrap key, no key ever created): every caller is
  :data:`LOCAL_PRINCIPAL` (admin of ``default``), and the app refuses to start on a non-loopback host.
* Credentials configured: a ``/v1`` request without a credential is 401 at the door (defence in depth: the
  route guards say the same), an unknown, revoked, expired or malformed credential is 401 everywhere, and so is a
  user token issued before its user was erased (its message says so).
* Operations surfaces (``/metrics``, ``/metrics/state``, ``/v1/backlog``, the OpenAPI document and the docs
  pages) follow ``AGENT_SIGNAL_OPS_OPEN`` (producers/http/access/ops.py).
* Over the rate: 429 ``rate_limited`` with ``Retry-After``. A request is charged to its credential's bucket
  (``AGENT_SIGNAL_RATE_LIMIT_PER_S``) and its tenant's (``AGENT_SIGNAL_TENANT_RATE_LIMIT_PER_S``: all the
  tenant's keys and the user tokens they minted together) in one script; the message says whose was empty.

Redis work on the hot path is one async round trip (both rate buckets, a chunk of tokens at a time); verified
keys, each tenant's erased users' token floors (one hash per tenant, looked up in the process:
worker/ops/credentials.py), the "configured" state and the token secret are cached in the process
(``AGENT_SIGNAL_AUTH_CACHE_S``), and a cache miss is read in the threadpool, never on the event loop.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.exceptions import OutOfMemoryError, RedisError
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from producers.http.access.ops import OPS_ROUTES, check_ops
from producers.http.access.principal import (
    LOCAL_PRINCIPAL,
    Forbidden,
    NotFound,
    Principal,
    Unauthenticated,
)
from producers.http.access.throttle import FailedAuthThrottle, Throttled
from producers.http.settings import DoorSettings
from producers.http.web_common import error_response
from worker.keys.layout import Keys
from worker.ops.credentials import (
    BOOTSTRAP_ID,
    LOCAL_ID,
    MIN_BOOTSTRAP_KEY_CHARS,
    MIN_TOKEN_SECRET_CHARS,
    CredentialStore,
    NeedsIO,
    UserErased,
)
from worker.ops.rate_limit import RateDecision, RateLimiter
from worker.ops.roles import ROLES
from worker.settings import Settings, SettingsError
from worker.store.server.client import async_redis_from_settings, redis_from_settings
from worker.store.server.safety import store_error_reason
from worker.telemetry.process_metrics import process_metrics

__all__ = [
    "DEFAULT_RATE_LIMIT_PER_S",
    "DEFAULT_TENANT_RATE_LIMIT_PER_S",
    "Authenticator",
    "bootstrap_key_of",
    "check_can_serve",
    "credentials_of",
    "install_auth",
    "is_loopback",
    "is_root",
]

log = logging.getLogger(__name__)
T = TypeVar("T")
ALLOWED = RateDecision(True)

DEFAULT_RATE_LIMIT_PER_S = 100.0  # per credential, when credentials are configured and the setting is unset
# All of a tenant's credentials together (keys and the user tokens they mint), likewise: five credentials at
# their full rate, about what one web process serves of reads; raise it with the web replicas.
DEFAULT_TENANT_RATE_LIMIT_PER_S = 500.0


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback address (127.0.0.0/8, ::1)."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bootstrap_key_of(door: DoorSettings) -> str | None:
    """``AGENT_SIGNAL_BOOTSTRAP_KEY``, else the deprecated ``AGENT_SIGNAL_API_TOKEN``, else None."""
    if door.bootstrap_key is not None and door.bootstrap_key.get_secret_value():
        return door.bootstrap_key.get_secret_value()
    return door.api_token or None


def check_credential_settings(settings: DoorSettings) -> None:
    """Refuse a bootstrap key or token secret too short to be one (names the variable, never the value)."""
    key = settings.bootstrap_key.get_secret_value() if settings.bootstrap_key is not None else ""
    if settings.bootstrap_key is not None and len(key) < MIN_BOOTSTRAP_KEY_CHARS:
        raise SettingsError(
            f"refusing to start: AGENT_SIGNAL_BOOTSTRAP_KEY must be at least {MIN_BOOTSTRAP_KEY_CHARS} "
            f"characters (it is {len(key)})"
        )
    secret = settings.token_secret.get_secret_value() if settings.token_secret is not None else ""
    if settings.token_secret is not None and len(secret) < MIN_TOKEN_SECRET_CHARS:
        raise SettingsError(
            f"refusing to start: AGENT_SIGNAL_TOKEN_SECRET must be at least {MIN_TOKEN_SECRET_CHARS} characters"
        )
    if not key and settings.api_token:
        log.warning("AGENT_SIGNAL_API_TOKEN is deprecated: set AGENT_SIGNAL_BOOTSTRAP_KEY instead")


def check_can_serve(settings: DoorSettings, store: CredentialStore) -> None:
    """Refuse to serve on a non-loopback host without any credential (one line naming the fix)."""
    check_credential_settings(settings)
    if not is_loopback(settings.host) and not store.configured():
        raise SettingsError(
            f"refusing to start: AGENT_SIGNAL_HOST={settings.host} is not a loopback address and no credential "
            "is configured; set AGENT_SIGNAL_BOOTSTRAP_KEY (an admin key, at least 16 characters) or create a "
            "key with `agent-signal keys create`"
        )


def is_root(principal: Principal) -> bool:
    """The operator's own credentials (the bootstrap key; the local caller when none is configured): they
    manage keys of every tenant, so a platform can onboard tenants."""
    return principal.credential_id in (BOOTSTRAP_ID, LOCAL_ID) and principal.role == "admin"


def credentials_of(request: Request) -> CredentialStore:
    """The app's credential store (the one the middleware verifies with)."""
    auth: Authenticator = request.app.state.auth
    return auth.store


class Authenticator:
    """Resolves bearers to principals and charges rate buckets; owns its Redis clients (made lazily)."""

    def __init__(self, settings: Settings, door: DoorSettings) -> None:
        self.settings = settings
        self.door = door
        self.keys = Keys(settings.key_prefix)
        self._client: Redis | None = None
        self._store: CredentialStore | None = None
        self._async: tuple[asyncio.AbstractEventLoop, AsyncRedis] | None = None
        self._limiters: dict[tuple[float | None, float | None], RateLimiter] = {}
        self.throttle = FailedAuthThrottle(door.auth_failures_per_s, door.auth_failure_burst)

    @property
    def store(self) -> CredentialStore:
        if self._store is None:
            token_secret = self.door.token_secret
            self._client = redis_from_settings(self.settings)
            self._store = CredentialStore(
                self._client,
                self.keys,
                bootstrap_key=bootstrap_key_of(self.door),
                token_secret=token_secret.get_secret_value() if token_secret is not None else None,
                cache_s=self.door.auth_cache_s,
                tenant_max_keys=self.settings.tenant_max_keys,
            )
        return self._store

    async def _call(self, fn: Callable[[bool], T]) -> T:
        """``fn(allow_io=False)`` from the cache, else ``fn(True)`` in the threadpool (blocking Redis)."""
        try:
            return fn(False)
        except NeedsIO:
            return await run_in_threadpool(fn, True)

    async def _lookup(self, fn: Callable[[bool], T], client: str | None) -> tuple[T, bool]:
        """:meth:`_call` for a bearer's verification, and whether it looked in Redis: a lookup (cache miss) first
        passes the client address's failed-authentication throttle (producers/http/access/throttle.py), which
        raises Throttled."""
        try:
            return fn(False), False
        except NeedsIO:
            self.throttle.check(client)
            return await run_in_threadpool(fn, True), True

    async def resolve(self, bearer: str | None, client: str | None = None) -> Principal | None:
        """The caller; None when no credential was given and credentials are configured.

        Raises Unauthenticated for a credential that does not verify (a failure counted against ``client``'s
        address), Throttled when that address may not cost another lookup now."""
        store = self.store
        if bearer is None:
            configured = await self._call(lambda io: store.configured(allow_io=io))
            return None if configured else LOCAL_PRINCIPAL
        record, looked = await self._lookup(lambda io: store.verify(bearer, allow_io=io), client)
        if record is not None:
            if record.role not in ROLES:  # written by hand into Redis, not by CredentialStore.create
                raise Unauthenticated("unrecognised credential")
            return Principal(tenant=record.tenant, role=record.role, credential_id=record.id)
        if bearer.count(".") == 2:
            try:
                token, looked_too = await self._lookup(
                    lambda io: store.check_user_token(bearer, allow_io=io), client
                )
            except UserErased as exc:  # refused as any credential that does not verify, saying why
                self.throttle.failed(client)
                raise Unauthenticated(str(exc)) from None
            if token is not None:
                return Principal(token.tenant, "user", f"{token.issuer}:{token.user_id}", token.user_id)
            looked = looked or looked_too
        # a refusal the cache answered cost no lookup and spends nothing of the address's budget: a deleted tenant's
        # clients sending its revoked keys on (refused from the cache, worker/ops/credentials.py) no longer lock out
        # every other tenant behind the same address (a walk of tenant deletion)
        if looked:
            self.throttle.failed(client)
        raise Unauthenticated("unknown, revoked or expired credential")

    def _limiter(self, configured: bool) -> RateLimiter | None:
        """The credential's and the tenant's buckets (each unset: its default with credentials, else none)."""
        settings = self.door
        rate = _rate(settings.rate_limit_per_s, DEFAULT_RATE_LIMIT_PER_S, configured)
        tenant_rate = _rate(settings.tenant_rate_limit_per_s, DEFAULT_TENANT_RATE_LIMIT_PER_S, configured)
        if rate is None and tenant_rate is None:
            return None
        limiter = self._limiters.get((rate, tenant_rate))
        if limiter is None:
            limiter = RateLimiter(self.keys, rate, tenant_rate_per_s=tenant_rate)
            self._limiters[(rate, tenant_rate)] = limiter
        return limiter

    async def rate_decision(self, principal: Principal, *, tenant_bucket: bool = True) -> RateDecision:
        """Charge the credential's and (``tenant_bucket``) its tenant's buckets (one round trip, or a token held
        in the process)."""
        store = self.store
        limiter = self._limiter(await self._call(lambda io: store.configured(allow_io=io)))
        if limiter is None:
            return ALLOWED
        try:
            return await limiter.acheck(
                self._async_client(), principal.credential_id, principal.tenant, tenant_bucket=tenant_bucket
            )
        except (
            OutOfMemoryError
        ):  # a full store refuses the buckets' write: this process's own buckets charge it
            return limiter.local(principal.credential_id, principal.tenant, tenant_bucket=tenant_bucket)

    def _async_client(self) -> AsyncRedis:
        loop = asyncio.get_running_loop()
        if self._async is None or self._async[0] is not loop:
            self._async = (loop, async_redis_from_settings(self.settings))
        return self._async[1]

    async def aclose(self) -> None:
        if self._async is not None and self._async[0] is asyncio.get_running_loop():
            await self._async[1].aclose()
        self._async = None
        if self._client is not None:
            self._client.close()


def _rate(setting: float | None, default: float, configured: bool) -> float | None:
    """A rate setting: unset is ``default`` with credentials configured and none without; 0 is none."""
    rate = setting if setting is not None else (default if configured else 0.0)
    return rate if rate > 0 else None


# Paths whose answer depends on no caller: the credential they carry is not looked up (a lookup reads the store,
# and liveness that fails with Redis is a restart loop for a process that is alive: a contract audit).
UNAUTHENTICATED_PATHS = frozenset({"/healthz"})
# Readiness answers the store's state itself (its checks: a full store is a warning, one down is not ready), so
# a rate bucket the store cannot charge does not answer for it.
READINESS_PATH = "/readyz"


def _bearer(scope: Scope) -> str | None:
    """The credential of ``Authorization: Bearer …``; raises Unauthenticated for another scheme."""
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            text: str = value.decode("latin-1")
            scheme, _, credential = text.strip().partition(" ")
            if scheme.lower() != "bearer" or not credential.strip():
                raise Unauthenticated("use Authorization: Bearer <key or token>")
            return credential.strip()
    return None


def _unauthorized(message: str) -> JSONResponse:
    response = error_response(401, "unauthorized", message)
    response.headers["WWW-Authenticate"] = "Bearer"
    return response


class AuthMiddleware:
    """Pure ASGI (streams pass through untouched): principal on ``scope["state"]``, 401/403/429/503 early."""

    def __init__(self, app: ASGIApp, auth: Authenticator, ops_paths: frozenset[str]) -> None:
        self.app = app
        self.auth = auth
        self.ops_paths = ops_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        response = await self._admit(scope)
        if response is not None and scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})  # policy violation
            return
        if response is not None:
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _rate(self, principal: Principal, ops: bool, path: str) -> RateDecision:
        """The rate decision. The operations reads (scrapes, the autoscaler's backlog) are charged to their
        credential alone (a tenant ingesting at its rate must not cost Prometheus its scrape, nor KEDA its
        backlog, at peak load), and pass when the store cannot answer: a scrape during an outage is how the
        outage shows (its credential was resolved already: the bootstrap key, or one the auth cache holds).
        Readiness passes too (it answers the store's state itself). A full store (``noeviction`` refuses the
        buckets' write) charges no shared bucket: :meth:`Authenticator.rate_decision` charges this process's
        own instead, since a 503 there took every web pod out of its Service and refused the reads that show an
        operator why and the writes that free memory (a resource walk)."""
        try:
            return await self.auth.rate_decision(principal, tenant_bucket=not ops)
        except RedisError:
            if not (ops or path == READINESS_PATH):
                raise
            process_metrics().add("agent_signal_store_unavailable_total", {"where": "auth"})
            return ALLOWED

    async def _admit(self, scope: Scope) -> JSONResponse | None:
        """None to let the request in (principal set), else the response that refuses it."""
        path: str = scope.get("path", "")
        if path in UNAUTHENTICATED_PATHS:  # liveness reads nothing: a credential sent to it is not looked up
            return None
        try:
            client = scope.get("client")
            principal = await self.auth.resolve(_bearer(scope), client[0] if client else None)
            if path in self.ops_paths:
                check_ops(principal, self.auth.door)
            elif principal is None and path.startswith("/v1"):
                raise Unauthenticated("missing bearer credential (Authorization: Bearer <key or token>)")
            decision = (
                await self._rate(principal, path in self.ops_paths, path)
                if principal is not None
                else ALLOWED
            )
        except Unauthenticated as exc:
            return _unauthorized(str(exc))
        except Throttled as exc:
            response = error_response(429, "rate_limited", str(exc))
            response.headers["Retry-After"] = str(exc.retry_after_s)
            return response
        except Forbidden as exc:
            return error_response(403, "forbidden", str(exc))
        except RedisError as exc:
            log.warning("auth: the store is unavailable (%s)", type(exc).__name__)
            process_metrics().add("agent_signal_store_unavailable_total", {"where": "auth"})
            message = f"the store is unavailable ({store_error_reason(exc)}); retry later"
            response = error_response(503, "store_unavailable", message)
            response.headers["Retry-After"] = str(self.auth.settings.store_retry_after_s)
            return response
        if not decision.allowed:
            whose = "this tenant's" if decision.refused_by == "tenant" else "this credential's"
            retry_after = decision.retry_after_s
            response = error_response(429, "rate_limited", f"over {whose} rate; retry in {retry_after}s")
            response.headers["Retry-After"] = str(retry_after)
            return response
        scope.setdefault("state", {})["principal"] = principal
        return None


def install_auth(app: FastAPI, settings: Settings, door: DoorSettings) -> Authenticator:
    """The middleware, the 401/403/404 handlers, and the startup refusal (wrapping the app's lifespan)."""
    auth = Authenticator(settings, door)
    app.state.auth = auth
    ops_paths = {
        *OPS_ROUTES,
        app.openapi_url,
        app.docs_url,
        app.redoc_url,
        app.swagger_ui_oauth2_redirect_url,
    }
    app.add_middleware(AuthMiddleware, auth=auth, ops_paths=frozenset(p for p in ops_paths if p))
    _install_handlers(app)
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(asgi_app: Any) -> AsyncIterator[Any]:
        try:
            await run_in_threadpool(check_can_serve, door, auth.store)
            async with inner(asgi_app) as state:
                yield state
        finally:
            await auth.aclose()

    app.router.lifespan_context = lifespan
    return auth


def _install_handlers(app: FastAPI) -> None:
    async def unauthenticated(_: Request, exc: Exception) -> JSONResponse:
        return _unauthorized(str(exc))

    async def forbidden(_: Request, exc: Exception) -> JSONResponse:
        return error_response(403, "forbidden", str(exc))

    async def not_found(_: Request, exc: Exception) -> JSONResponse:
        return error_response(404, "not_found", str(exc) or "not found")

    app.add_exception_handler(Unauthenticated, unauthenticated)
    app.add_exception_handler(Forbidden, forbidden)
    app.add_exception_handler(NotFound, not_found)
