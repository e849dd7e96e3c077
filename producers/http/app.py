"""The HTTP app (FastAPI), built by ``create_web_app(settings)``: the routers, auth, and error shapes.
Its own settings are the door's section (producers/http/settings.py) and the sessions' (sessions/settings.py),
read once here and kept on ``app.state`` (``door``, ``session_limits``).

Every error answers ``{"error": {"code", "message", "field"}}`` (``field`` null when no one field is at fault), never a stack trace;
a store failure (Redis full, read-only or unreachable) is ``503 store_unavailable`` with ``Retry-After``.
Credentials, principals and rate limits: producers/http/access/auth.py (docs/security.md).
The producer (Redis and broker connections) opens at startup, not at import; startup first makes the boot checks
(:func:`check_boot`): the Redis configuration (worker/store/server/safety.py: an evicting policy is refused) and the function
definitions. ``agent-signal web`` makes them before uvicorn starts, so that a refusal is one line and no traceback
(producers/http/serve.py), and hands their result to the app, whose startup then does not make them again.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from opentelemetry.trace import SpanKind
from redis.exceptions import RedisError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from policies.dmail import AgentToolsSettings
from producers.http.access.auth import install_auth
from producers.http.access_log import flat_routes, install_access_log, route_template
from producers.http.docs_pages import install_docs
from producers.http.door import install_door
from producers.http.read_memo import ReadMemo
from producers.http.records import OVER_LIMIT_CODES
from producers.http.routes.events import router as events_router
from producers.http.routes.functions import router as functions_router
from producers.http.routes.keys import router as keys_router
from producers.http.routes.ops import router as ops_router
from producers.http.routes.outbox import router as outbox_router
from producers.http.routes.receipts import router as receipts_router
from producers.http.routes.routing import router as routing_router
from producers.http.routes.scopes import router as scopes_router
from producers.http.routes.self_iteration import router as self_iteration_router
from producers.http.routes.session_access import session_full
from producers.http.routes.sessions import router as sessions_router
from producers.http.routes.tenants import router as tenants_router
from producers.http.routes.ui import router as ui_router
from producers.http.routes.users import router as users_router
from producers.http.settings import DoorSettings, door_settings
from producers.http.streams.feed import Feed
from producers.http.web_common import error_response, request_validation_error
from producers.sdk.producer import Producer
from sessions.function_store import ContentionError
from sessions.functions import FunctionDef, load_function_dir
from sessions.settings import session_limit_settings
from sessions.store import SessionFull, SessionGone, SessionLimits
from worker.core.errors import OverLimit, TenantDeleted
from worker.core.tenancy import DEFAULT_TENANT
from worker.intake.source_event import InvalidEvent, StoreUnavailable
from worker.settings import Settings, plugin_settings
from worker.store.server.safety import StoreSafety, check_at_boot, note_store_failure, store_error_reason
from worker.telemetry.logs import install_pseudonyms
from worker.telemetry.recorder import Telemetry, configure_telemetry

__all__ = ["BootChecks", "check_boot", "create_web_app"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BootChecks:
    """What the boot checks found (:func:`check_boot`): the store's verdict and the function definitions by name."""

    store_safety: StoreSafety
    function_defs: dict[str, FunctionDef]


def check_boot(settings: Settings) -> BootChecks:
    """The checks that stop the web app at startup, in one place for ``agent-signal web`` and the app's startup:
    an evicting Redis raises UnsafeStore (naming the policy and the fix), a broken function definition under
    ``AGENT_SIGNAL_FUNCTIONS_DIR`` FunctionLoadError (naming the file and the field). Also reads the pseudonym
    key this process's log lines name users by (worker/telemetry/logs.py)."""
    from worker.store.server.client import redis_from_settings

    client = redis_from_settings(settings)
    try:
        store_safety = check_at_boot(client, settings, component="web")
        install_pseudonyms(client, settings)
    finally:
        client.close()
    functions_dir = plugin_settings(AgentToolsSettings, settings).functions_dir
    return BootChecks(store_safety, load_function_dir(functions_dir)[0] if functions_dir else {})


def create_web_app(
    settings: Settings,
    *,
    producer: Producer | None = None,
    door: DoorSettings | None = None,
    boot: BootChecks | None = None,
    telemetry: Telemetry | None = None,
) -> FastAPI:
    """The ASGI app for ``settings``; pass ``producer`` to share one (tests, embedding; ``agent-signal web``
    builds it before serving, so a plugin that fails to load is one line, not a failed startup's traceback), and
    ``telemetry`` with it when the producer was given one (the caller shuts it down). ``door`` defaults to
    the door's section of the environment and of ``settings``' extras. ``boot``: the result of
    :func:`check_boot` made before (``agent-signal web``); without it the app's startup makes the checks."""
    door = door or door_settings(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.settings = settings
        checked = boot or check_boot(settings)
        app.state.store_safety = checked.store_safety
        app.state.function_defs = checked.function_defs
        app.state.telemetry = telemetry or configure_telemetry(settings, service_name="agent-signal-web")
        app.state.producer = producer or Producer(settings, telemetry=app.state.telemetry)
        app.state.feed = Feed.from_settings(settings, door)  # one Redis subscriber for every receipts stream
        yield
        await app.state.feed.aclose()
        if producer is None:
            app.state.producer.close()
        if telemetry is None:
            app.state.telemetry.shutdown()

    app = FastAPI(
        title="Agent Signal",
        version="0.1.0",
        lifespan=lifespan,
        docs_url=None,  # FastAPI's pages load from a CDN; ours from packaged files (producers/http/docs_pages.py)
        redoc_url=None,
        swagger_ui_oauth2_redirect_url=None,
    )
    app.state.door = door
    # GET /v1/overview's runs count per tenant (producers/http/read_memo.py)
    app.state.overview_memo = ReadMemo()
    app.state.session_limits = SessionLimits.from_settings(session_limit_settings(settings), settings)
    install_docs(app)  # /docs, /redoc, /docs-assets/*; before install_auth and install_door read its paths
    # The routers' own routes, added as they are: include_router would wrap each in a per-app copy whose
    # parameters and models FastAPI builds again on the app's first request, ~0.1 s of CPU per app (a test
    # suite builds hundreds). The routes hold nothing of an app (everything per app is read from
    # request.app.state), so every app of a process shares them; routers without error answers of their own
    # declare the shared ones (api_models.SHARED_ERRORS) where they are made.
    for router in (
        events_router,
        ops_router,
        outbox_router,
        scopes_router,
        routing_router,
        sessions_router,
        functions_router,
        self_iteration_router,
        receipts_router,
        ui_router,
        keys_router,
        users_router,
        tenants_router,
    ):
        app.router.routes.extend(router.routes)
    # producers/http/access/auth.py: principal per request, 401/403/404, rate limits
    install_auth(app, settings, door)
    _install_tracing(app)
    _install_error_handlers(app)
    install_door(app, door)  # added last, so it runs first: body limit, content type, Host, Origin, headers
    install_access_log(app)  # outermost: one line per request, the door's refusals included
    return app


def _install_tracing(app: FastAPI) -> None:
    """A SERVER span per /v1 request, continuing the caller's traceparent when it sends one. Its name and
    ``http.route`` are the route's template (``GET /v1/events/{event_id}``), as the access log's: the path as
    sent names users, scopes and events (an erasure's own request named the erased user), and any caller could
    mint span names with made-up paths."""
    routes: list[Any] = []

    @app.middleware("http")
    async def traced(request: Request, call_next: Any) -> Any:
        telemetry = getattr(request.app.state, "telemetry", None)
        if telemetry is None or not telemetry.enabled or not request.url.path.startswith("/v1"):
            return await call_next(request)
        parent = telemetry.extract(request.headers.get("traceparent"))
        with telemetry.span(
            request.method,
            {"http.request.method": request.method},
            parent=parent,
            kind=SpanKind.SERVER,
        ) as span:
            response = await call_next(request)
            if span is not None:
                if not routes:
                    routes.extend(flat_routes(request.app.router.routes))
                template = route_template(request.scope, routes)
                span.update_name(f"{request.method} {template}")
                span.set_attribute("http.route", template)
                span.set_attribute("http.response.status_code", response.status_code)
            return response


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(exc.status_code, f"http_{exc.status_code}", str(exc.detail))

    app.add_exception_handler(RequestValidationError, request_validation_error)  # type: ignore[arg-type]

    @app.exception_handler(SessionFull)
    async def full_session(_: Request, exc: SessionFull) -> JSONResponse:
        """A session write over one of its caps, or over the user's storage quota, on a route that did not
        answer it itself (activating a function, a session's settings): 413 or 429, never a 500."""
        return session_full(exc)

    @app.exception_handler(SessionGone)
    async def session_gone(_: Request, exc: SessionGone) -> JSONResponse:
        """The session's user was erased (or the session expired) while a write to it ran: nothing stored."""
        return error_response(404, "session_gone", str(exc))

    @app.exception_handler(ContentionError)
    async def contended(_: Request, exc: ContentionError) -> JSONResponse:
        return error_response(503, "busy", str(exc))

    @app.exception_handler(OverLimit)
    async def over_limit(_: Request, exc: OverLimit) -> JSONResponse:
        """A scope's inbox, the tenant's queue or a storage quota is at its limit: nothing of the request was
        stored. Retry-After says when waiting may help (none when only freeing data does)."""
        code = OVER_LIMIT_CODES.get(exc.what, "tenant_queue_full")
        response = error_response(429, code, exc.message, exc.field)
        if exc.retry_after_s > 0:
            response.headers["Retry-After"] = str(exc.retry_after_s)
        return response

    @app.exception_handler(TenantDeleted)
    async def tenant_deleted(_: Request, exc: TenantDeleted) -> JSONResponse:
        """An admission for a tenant deleted since its caller was let in (its keys revoked meanwhile)."""
        return error_response(410, "tenant_deleted", str(exc), exc.field)

    @app.exception_handler(InvalidEvent)
    async def invalid_event(_: Request, exc: InvalidEvent) -> JSONResponse:
        """An event (or an id) a route's own rules refused, raised from below the route: its status (422, 409
        or 413) and the error body naming the field."""
        return error_response(exc.status_code, exc.error.code, exc.error.message, exc.error.field)

    @app.exception_handler(StoreUnavailable)
    async def store_unavailable(_: Request, exc: StoreUnavailable) -> JSONResponse:
        return _store_unavailable(exc.error.message, exc.retry_after_s)

    @app.exception_handler(RedisError)
    async def store_failed(request: Request, exc: RedisError) -> JSONResponse:
        """Any route whose store call failed answers 503 (never 500): Redis full, read-only or unreachable."""
        producer = getattr(request.app.state, "producer", None)
        # the route's template, never the path as sent (it names users and scopes): a log line and a metric label
        where = f"door {request.method} {route_template(request.scope)}"
        if producer is not None:  # off the event loop: an unreachable Redis may take its timeout to say so
            store, caller = producer.store, getattr(request.state, "principal", None)
            stats = store.keys.for_tenant(getattr(caller, "tenant", None) or DEFAULT_TENANT).tenant_stats
            await run_in_threadpool(note_store_failure, store.client, stats, exc, where)
        retry_after = request.app.state.settings.store_retry_after_s
        message = f"the store is unavailable ({store_error_reason(exc)}); retry later"
        return _store_unavailable(message, retry_after)

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return error_response(500, "internal", f"internal error ({type(exc).__name__}); see the server log")


def _store_unavailable(message: str, retry_after_s: int) -> JSONResponse:
    response = error_response(503, "store_unavailable", message)
    response.headers["Retry-After"] = str(retry_after_s)
    return response
