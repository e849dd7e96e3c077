"""The door: what every HTTP request passes before any route (or auth) sees it, as pure ASGI middlewares
(not ``BaseHTTPMiddleware``: response streams such as ``/v1/receipts/stream`` pass through untouched).

Outermost first, each one job, each answering with the one error body (``producers.http.web_common.error_response``):

1. :class:`SecurityHeaders` adds ``Content-Security-Policy``, ``X-Frame-Options: DENY``,
   ``X-Content-Type-Options: nosniff`` and ``Referrer-Policy: no-referrer`` to every response (its own
   answers included). The UI loads only its own files, so its policy is ``default-src 'self'``; the API docs
   pages (FastAPI's Swagger UI and ReDoc load from a CDN with an inline bootstrap) get a policy of their own.
2. :class:`HostGuard` refuses a ``Host`` that is not a loopback name, the bind host (unless a wildcard) or in
   ``AGENT_SIGNAL_ALLOWED_HOSTS``: ``400 bad_host``. That is what stops DNS rebinding, where a
   foreign name resolves to our address and the browser calls us as if we were that site.
3. :class:`OriginGuard` refuses a request whose ``Origin`` is neither its own (the Host's name and port) nor in
   ``AGENT_SIGNAL_ALLOWED_ORIGINS``: ``403 bad_origin``. Browsers send ``Origin`` on every cross-site write.
4. :class:`JsonContentType` requires ``application/json`` on a write (POST, PUT, PATCH, DELETE) that has a
   body: ``415 unsupported_media_type`` naming ``content-type``. With (3) this refuses the cross-site
   ``text/plain`` POST (a "simple" request a web page can send without a CORS preflight).
5. :class:`BodyLimit` caps every request body at ``AGENT_SIGNAL_MAX_REQUEST_BYTES``: a declared
   ``Content-Length`` above it is ``413 request_too_large`` before a byte is read; a body without one
   (chunked) is counted while the route reads it and answered 413 as soon as the count passes the limit.
   It reads nothing ahead: authentication (inside the door) answers before any body byte is read, and a
   body read before a caller is known stops at 64 KiB. The server reads at most its own buffer (uvicorn's
   64 KiB high-water mark) of a body nobody reads; producers/http/connections.py bounds how long that may take.
   It also bounds how many bodies one caller keeps the process waiting for (:class:`PendingBodies`): a route
   that starts reading a body takes one of its credential's and its tenant's slots until the body has
   arrived, and past ``AGENT_SIGNAL_MAX_PENDING_BODIES_PER_CREDENTIAL`` or
   ``AGENT_SIGNAL_TENANT_MAX_PENDING_BODIES`` the request is answered ``429 rate_limited`` at once. Without it
   a caller with a valid key held the process's connection cap by sending request heads and no body, each
   for ``AGENT_SIGNAL_BODY_TIMEOUT_S``. And it bounds the bytes of bodies the process holds
   (:class:`BodyBytes`): from a body's first byte until its request is answered (a parsed body takes up to
   ~32x its bytes), at most ``AGENT_SIGNAL_MAX_BODY_BYTES_IN_FLIGHT`` in all, half of it per credential and
   half of it per tenant (all of a tenant's credentials and user tokens together: a tenant with many tokens
   still leaves the other half to the other tenants); past the credential's or the tenant's half
   ``429 rate_limited``, past the whole ``503 busy``, all with ``Retry-After``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from fastapi import FastAPI
from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from producers.http.access.principal import Principal
from producers.http.settings import DoorSettings
from producers.http.web_common import error_response
from worker.core.clock import now_ms

__all__ = [
    "API_CSP",
    "DOCS_CSP",
    "SERVER_TIME_HEADER",
    "UNAUTHENTICATED_BYTES",
    "BodyBytes",
    "BodyLimit",
    "HostGuard",
    "JsonContentType",
    "OriginGuard",
    "PendingBodies",
    "SecurityHeaders",
    "allowed_hosts",
    "install_door",
]

API_CSP = "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'"
# Swagger UI and ReDoc (FastAPI's docs pages) load their bundles from jsdelivr and start with an inline script.
DOCS_CSP = (  # the docs pages load only the packaged Swagger UI and ReDoc (producers/http/docs_assets/): no CDN
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; worker-src 'self' blob:; frame-ancestors 'none'; base-uri 'none'; "
    "form-action 'self'; object-src 'none'"
)
FIXED_HEADERS = (
    ("x-frame-options", "DENY"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
)
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::", "[::]"})
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
BODILESS_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})  # a body on one of these is refused (BodyLimit)
DEFAULT_PORTS = {"http": 80, "https": 443}
UNAUTHENTICATED_BYTES = 64 * 1024  # the most of a body read before the caller is known (contract §Trust)
PENDING_RETRY_AFTER_S = 1  # a held body ends within AGENT_SIGNAL_BODY_TIMEOUT_S; most within milliseconds
BODY_BYTES_RETRY_AFTER_S = 1  # held bytes are freed when their request is answered, most within milliseconds


# The service's clock (Redis's, worker/core/clock.py) at each answer, in Unix ms: the console's ages start from it
# (a browser, or the web host's Date header, may be off by minutes).
SERVER_TIME_HEADER = "x-server-time-ms"


class SecurityHeaders:
    """Add the security headers to every response that does not set them itself, and :data:`SERVER_TIME_HEADER`."""

    def __init__(self, app: ASGIApp, *, docs_paths: Collection[str] = ()) -> None:
        self.app = app
        self.docs_paths = frozenset(docs_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        csp = DOCS_CSP if scope["path"] in self.docs_paths else API_CSP

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in (("content-security-policy", csp), *FIXED_HEADERS):
                    if name not in headers:
                        headers[name] = value
                headers[SERVER_TIME_HEADER] = str(now_ms())
            await send(message)

        await self.app(scope, receive, send_with_headers)


class HostGuard:
    """``400 bad_host`` unless the Host header names an allowed host (``*`` allows any)."""

    def __init__(self, app: ASGIApp, *, hosts: Collection[str]) -> None:
        self.app = app
        self.hosts = frozenset(host.lower().rstrip(".") for host in hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        host = Headers(scope=scope).get("host") if scope["type"] == "http" else None
        if host is None or "*" in self.hosts or self._allowed(host.lower()):
            await self.app(scope, receive, send)  # no Host at all is not a browser: nothing to rebind
            return
        message = (
            f"host {host[:100]!r} is not served here (AGENT_SIGNAL_ALLOWED_HOSTS lists the allowed names)"
        )
        await error_response(400, "bad_host", message, "host")(scope, receive, send)

    def _allowed(self, host: str) -> bool:
        return host.rstrip(".") in self.hosts or _host_name(host) in self.hosts


class OriginGuard:
    """``403 bad_origin`` for a request whose Origin is neither its own nor listed (``*`` allows any)."""

    def __init__(self, app: ASGIApp, *, origins: Collection[str]) -> None:
        self.app = app
        self.origins = frozenset(origin.lower().rstrip("/") for origin in origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        if origin is None or "*" in self.origins or origin.lower().rstrip("/") in self.origins:
            await self.app(scope, receive, send)
            return
        if _same_origin(origin, headers.get("host", "")):
            await self.app(scope, receive, send)
            return
        message = f"origin {origin[:100]!r} may not call this API (AGENT_SIGNAL_ALLOWED_ORIGINS lists the allowed ones)"
        await error_response(403, "bad_origin", message, "origin")(scope, receive, send)


class JsonContentType:
    """``415 unsupported_media_type`` for a write with a body that is not ``application/json``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in WRITE_METHODS:
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        declared = headers.get("content-length")
        has_body = declared not in (None, "0") or "transfer-encoding" in headers
        content_type = headers.get("content-type", "")
        if not has_body or content_type.partition(";")[0].strip().lower() == "application/json":
            await self.app(scope, receive, send)
            return
        given = repr(content_type[:100]) if content_type else "none"
        message = f"a request body must be JSON (Content-Type: application/json); got {given}"
        await error_response(415, "unsupported_media_type", message, "content-type")(scope, receive, send)


@dataclass
class PendingBodies:
    """The request bodies this process is waiting for, counted per credential and per tenant (see the module
    docstring, 5). All on the event loop's thread: no lock."""

    per_credential: int  # AGENT_SIGNAL_MAX_PENDING_BODIES_PER_CREDENTIAL
    per_tenant: int  # AGENT_SIGNAL_TENANT_MAX_PENDING_BODIES; 0: none
    _credentials: Counter[str] = field(default_factory=Counter)
    _tenants: Counter[str] = field(default_factory=Counter)

    def take(self, principal: Principal) -> str | None:
        """Count one more body of ``principal``'s; else (a cap reached) the refusal's message."""
        credential, tenant = principal.credential_id, principal.tenant
        if self._credentials[credential] >= self.per_credential:
            return (
                f"this credential already has {self.per_credential} requests whose bodies have not arrived "
                f"(AGENT_SIGNAL_MAX_PENDING_BODIES_PER_CREDENTIAL); retry in {PENDING_RETRY_AFTER_S}s"
            )
        if self.per_tenant and self._tenants[tenant] >= self.per_tenant:
            return (
                f"this tenant already has {self.per_tenant} requests whose bodies have not arrived "
                f"(AGENT_SIGNAL_TENANT_MAX_PENDING_BODIES); retry in {PENDING_RETRY_AFTER_S}s"
            )
        self._credentials[credential] += 1
        self._tenants[tenant] += 1
        return None

    def give_back(self, principal: Principal) -> None:
        for counts, name in ((self._credentials, principal.credential_id), (self._tenants, principal.tenant)):
            counts[name] -= 1
            if counts[name] <= 0:
                del counts[name]  # a counter per caller seen would grow with every credential ever used

    def held(self, principal: Principal) -> tuple[int, int]:
        """(the credential's, the tenant's) bodies waited for now (tests and diagnostics)."""
        return self._credentials[principal.credential_id], self._tenants[principal.tenant]


@dataclass(frozen=True)
class Refusal:
    """An answer the door gives instead of the route's: its status, error code and message, and Retry-After."""

    status: int
    code: str
    message: str
    retry_after_s: int | None = None  # None: waiting will not help (a body too large)


@dataclass
class BodyBytes:
    """The request-body bytes this process holds, from each body's first byte until its request has been
    answered, in all, per credential and per tenant (see the module docstring, 5). A body is parsed whole and
    its parse takes up to ~32x its bytes, so this is what bounds the memory many large bodies at once can take;
    the caps of :class:`PendingBodies` count requests, not bytes, and only while bodies arrive. Bytes read
    before a caller is known (at most 64 KiB a request) count toward the whole only. On the event loop's
    thread."""

    budget: int  # AGENT_SIGNAL_MAX_BODY_BYTES_IN_FLIGHT; 0: none
    _total: int = 0
    _credentials: Counter[str] = field(default_factory=Counter)
    _tenants: Counter[str] = field(default_factory=Counter)

    @property
    def per_credential(self) -> int:
        """One credential's share: half the budget, so one caller alone never holds the whole process."""
        return self.budget // 2

    @property
    def per_tenant(self) -> int:
        """One tenant's share (its credentials and user tokens together): half the budget, so a tenant's many
        tokens never hold the whole process either."""
        return self.budget // 2

    def check(self, credential: str | None, size: int, *, tenant: str | None = None) -> Refusal | None:
        """Why ``size`` more bytes of ``credential``'s (of ``tenant``) would not fit now, or None."""
        if not self.budget or size <= 0:
            return None
        retry = f"retry in {BODY_BYTES_RETRY_AFTER_S}s"
        shares = (
            ("credential", "one credential", credential, self._credentials, self.per_credential),
            (
                "tenant",
                "one tenant (its credentials and user tokens together)",
                tenant,
                self._tenants,
                self.per_tenant,
            ),
        )
        for what, who, name, counts, share in shares:
            if name is not None and counts[name] + size > share:
                message = (
                    f"this {what}'s request bodies would take {counts[name] + size} bytes in this web process; "
                    f"{who} may hold half of AGENT_SIGNAL_MAX_BODY_BYTES_IN_FLIGHT ({share}); {retry}"
                )
                return Refusal(429, "rate_limited", message, BODY_BYTES_RETRY_AFTER_S)
        if self._total + size > self.budget:
            message = (
                f"this web process holds {self._total} bytes of request bodies, and "
                f"AGENT_SIGNAL_MAX_BODY_BYTES_IN_FLIGHT is {self.budget}; {retry}"
            )
            return Refusal(503, "busy", message, BODY_BYTES_RETRY_AFTER_S)
        return None

    def take(self, credential: str | None, size: int, *, tenant: str | None = None) -> Refusal | None:
        """Count ``size`` more bytes of ``credential``'s and ``tenant``'s (None: not known yet); else the
        refusal."""
        refusal = self.check(credential, size, tenant=tenant)
        if refusal is None and self.budget and size > 0:
            self._total += size
            for counts, name in ((self._credentials, credential), (self._tenants, tenant)):
                if name is not None:
                    counts[name] += size
        return refusal

    def give_back(self, credential: str | None, size: int, *, tenant: str | None = None) -> None:
        if not self.budget or size <= 0:
            return
        self._total -= size
        for counts, name in ((self._credentials, credential), (self._tenants, tenant)):
            if name is not None:
                counts[name] -= size
                if counts[name] <= 0:
                    del counts[name]  # a counter per caller seen would grow with every credential ever used

    def held(self, credential: str | None = None, *, tenant: str | None = None) -> int:
        """The bytes held now: by ``credential``, by ``tenant``, or (neither given) in all (tests and
        diagnostics)."""
        if credential is not None:
            return self._credentials[credential]
        return self._tenants[tenant] if tenant is not None else self._total


class BodyLimit:
    """``413 request_too_large`` for a body over ``max_bytes``: by its Content-Length before reading, or by
    counting a body without one while the route reads it (nothing is read ahead or buffered here: a request
    answered before its body is read, a 401 at the auth middleware, never has its body read at all). Until a
    principal is known (``scope["state"]["principal"]``, set by the auth middleware) at most
    ``unauthenticated_bytes`` are handed over: no credential means no body is read past 64 KiB. ``pending``:
    from the route's first read until the body has arrived (or the request ended) the caller holds one of its
    slots; a caller whose slots are all held is answered 429 before anything is read."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_bytes: int,
        unauthenticated_bytes: int = UNAUTHENTICATED_BYTES,
        pending: PendingBodies | None = None,
        in_flight: BodyBytes | None = None,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.unauthenticated_bytes = min(unauthenticated_bytes, max_bytes)
        self.pending = pending
        self.in_flight = in_flight

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            message = f"request body is {declared} bytes; the limit is {self.max_bytes}"
            await error_response(413, "request_too_large", message)(scope, receive, send)
            return
        if scope["method"] in BODILESS_METHODS and (
            declared not in (None, "0") or "transfer-encoding" in headers
        ):
            # no route reads one; a stream's disconnect listener would, and hold its bytes while the stream lasts
            message = f"a {scope['method']} request takes no body"
            await error_response(413, "request_too_large", message)(scope, receive, send)
            return
        body = _CountedBody(scope, receive, send, self)
        try:
            await self.app(scope, body.receive, body.send)
        except Exception:
            if not body.cut:
                raise
            # The body was cut (answered 413, or its client left): whatever the app made of the disconnect it
            # was handed (Starlette's ClientDisconnect, possibly inside a middleware's exception group) is moot.
        finally:
            body.give_back()
            body.give_back_bytes()  # held until the request was answered: its parse lives that long

    def principal_of(self, scope: Scope) -> Principal | None:
        """The caller the auth middleware found, or None while it is not known."""
        state = scope.get("state")
        principal = state.get("principal") if isinstance(state, dict) else None
        return principal if isinstance(principal, Principal) else None

    def limit_for(self, scope: Scope) -> int:
        """The caller's limit: ``max_bytes`` once a principal is known, else ``unauthenticated_bytes``."""
        return self.max_bytes if self.principal_of(scope) is not None else self.unauthenticated_bytes


class _CountedBody:
    """One request's ``receive`` and ``send`` for :class:`BodyLimit`: the body's bytes are counted as the app
    reads them; past the limit the 413 is answered here and the app is handed ``http.disconnect`` (so it stops
    reading) and its own answer is dropped. Nothing is raised through the app's middlewares, which may wrap
    exceptions in groups of their own. While the app waits for the body, the caller holds a pending-body slot."""

    def __init__(self, scope: Scope, receive: Receive, send: Send, limit: BodyLimit) -> None:
        self.scope = scope
        self._receive = receive
        self._send = send
        self.limit = limit
        self.size = 0
        self.ended = False  # the whole body was handed over: later messages pass through as they are
        self.started = False  # a response has started
        self.cut = False  # answered 413 or 429, or the client left before its body ended
        self.holder: Principal | None = None  # whose pending-body slot this request holds
        self.bytes_held = 0  # of this body, counted in the process's BodyBytes
        self.bytes_holder: Principal | None = None  # the caller they are counted for (None: not known yet)

    async def receive(self) -> Message:
        if self.cut:
            return {"type": "http.disconnect"}  # nothing more is read of a body that was cut
        if self.ended:
            return await self._receive()
        if self.holder is None and not await self._hold():
            return {"type": "http.disconnect"}
        if (
            self.size == 0
            and self.bytes_held == 0
            and (refusal := self._take_bytes(self._declared())) is not None
        ):
            await self._answer(refusal)  # a declared body is counted whole before it is read, or refused
            return {"type": "http.disconnect"}
        message = await self._receive()
        if message["type"] != "http.request":
            self.cut = True  # the client left mid-body: nobody is left to answer
            self.give_back()
            return message
        self.size += len(message.get("body", b""))
        limit = self.limit.limit_for(self.scope)
        if self.size > limit:
            await self._refuse(limit)
            return {"type": "http.disconnect"}
        if (refusal := self._take_bytes(self.size - self.bytes_held)) is not None:  # a body without a length
            await self._answer(refusal)
            return {"type": "http.disconnect"}
        self.ended = not message.get("more_body", False)
        if self.ended:
            self.give_back()
        return message

    async def _hold(self) -> bool:
        """Take the caller's pending-body slot before waiting for its body; False: refused (answered 429)."""
        pending, principal = self.limit.pending, self.limit.principal_of(self.scope)
        if pending is None or principal is None:
            return True  # no caps, or no caller yet (at most 64 KiB is read: limit_for)
        refusal = pending.take(principal)
        if refusal is None:
            self.holder = principal
            return True
        await self._answer(Refusal(429, "rate_limited", refusal, PENDING_RETRY_AFTER_S))
        return False

    def _declared(self) -> int:
        """The body's declared Content-Length, else 0 (counted while it arrives)."""
        declared = Headers(scope=self.scope).get("content-length")
        return int(declared) if declared is not None and declared.isdigit() else 0

    def _take_bytes(self, size: int) -> Refusal | None:
        """Count ``size`` more bytes of this body in the process's budget; else the refusal. A declared body is
        counted whole at its first read: counted as they arrive, many bodies begun at once would each hold a
        part and all be refused, none finished (measured: 36 of 36 posts refused so)."""
        in_flight = self.limit.in_flight
        if in_flight is None or size <= 0:
            return None
        if not self.bytes_held:  # the caller is known before a route reads (auth answers first) and stays so
            self.bytes_holder = self.limit.principal_of(self.scope)
        credential, tenant = self._bytes_holders()
        refusal = in_flight.take(credential, size, tenant=tenant)
        if refusal is None:
            self.bytes_held += size
        return refusal

    def give_back_bytes(self) -> None:
        """Free this body's bytes in the process's budget, once (its request was answered or ended)."""
        if self.limit.in_flight is not None and self.bytes_held:
            credential, tenant = self._bytes_holders()
            self.limit.in_flight.give_back(credential, self.bytes_held, tenant=tenant)
        self.bytes_held = 0

    def _bytes_holders(self) -> tuple[str | None, str | None]:
        """The credential and the tenant this body's bytes are counted for (None, None: not known yet)."""
        holder = self.bytes_holder
        return (holder.credential_id, holder.tenant) if holder is not None else (None, None)

    async def _answer(self, refusal: Refusal) -> None:
        """Cut the body and answer ``refusal`` (unless a response has started)."""
        self.cut = True
        self.give_back()
        if self.started:  # pragma: no cover - every route reads its body before it answers
            return
        response = error_response(refusal.status, refusal.code, refusal.message)
        if refusal.retry_after_s is not None:
            response.headers["Retry-After"] = str(refusal.retry_after_s)
        await response(self.scope, self._receive, self._send)

    def give_back(self) -> None:
        """Free the pending-body slot, once (the body arrived, was cut, or the request ended)."""
        if self.holder is not None and self.limit.pending is not None:
            self.limit.pending.give_back(self.holder)
        self.holder = None

    async def send(self, message: Message) -> None:
        if self.cut:
            return
        self.started = self.started or message["type"] == "http.response.start"
        await self._send(message)

    async def _refuse(self, limit: int) -> None:
        known = limit == self.limit.max_bytes
        message = f"request body is over the limit of {limit} bytes" + (
            "" if known else " before authentication"
        )
        await self._answer(Refusal(413, "request_too_large", message))


def _host_name(host: str) -> str:
    """``example.com:8000`` → ``example.com``; ``[::1]:8000`` → ``[::1]``."""
    if host.startswith("["):
        return host.partition("]")[0] + "]"
    return host.partition(":")[0].rstrip(".")


def _split_host(netloc: str) -> tuple[str, int | None] | None:
    """``Example.com:8000`` → ``("example.com", 8000)``; None when it is not a host[:port]."""
    try:
        parts = urlsplit(f"//{netloc}")
        port = parts.port
    except ValueError:
        return None
    return (parts.hostname.lower().rstrip("."), port) if parts.hostname else None


def _same_origin(origin: str, host: str) -> bool:
    """True when ``origin`` (``scheme://host[:port]``) names the request's own Host: the same name and port (a
    Host without a port was reached on 80 or 443). The scheme is not compared: behind a TLS-terminating proxy
    the app sees http while the page is https, and serving the other scheme takes the same name anyway."""
    scheme, sep, netloc = origin.partition("://")
    theirs = _split_host(netloc) if sep and "/" not in netloc else None
    ours = _split_host(host) if host else None
    if theirs is None or ours is None or theirs[0] != ours[0]:
        return False
    their_port = theirs[1] or DEFAULT_PORTS.get(scheme.lower())
    return their_port == ours[1] if ours[1] is not None else their_port in DEFAULT_PORTS.values()


def allowed_hosts(settings: DoorSettings) -> list[str]:
    """The loopback names, the bind host (unless a wildcard) and ``settings.allowed_hosts`` (tests list
    ``testserver``, the TestClient's). Loopback names are always safe: a rebinding page sends its own name."""
    hosts = [*LOOPBACK_HOSTS, *settings.allowed_hosts]
    bind = settings.host.strip().lower()
    if bind not in WILDCARD_BINDS:
        hosts.append(f"[{bind}]" if ":" in bind and not bind.startswith("[") else bind)
    return hosts


def install_door(app: FastAPI, settings: DoorSettings) -> None:
    """Add the door's middlewares to ``app``; call it last so the door runs before everything else."""
    docs_paths = [p for p in (app.docs_url, app.redoc_url, app.swagger_ui_oauth2_redirect_url) if p]
    # Starlette runs the middleware added last first: innermost (the body limit) is added first.
    pending = PendingBodies(settings.max_pending_bodies_per_credential, settings.tenant_max_pending_bodies)
    in_flight = BodyBytes(settings.body_bytes_in_flight)
    app.add_middleware(BodyLimit, max_bytes=settings.max_request_bytes, pending=pending, in_flight=in_flight)
    app.add_middleware(JsonContentType)
    app.add_middleware(OriginGuard, origins=settings.allowed_origins)
    app.add_middleware(HostGuard, hosts=allowed_hosts(settings))
    app.add_middleware(SecurityHeaders, docs_paths=docs_paths)
