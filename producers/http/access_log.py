"""The web process's access log: one structured line per HTTP request, ``install_access_log(app)``.

A pure ASGI middleware (response streams pass through untouched; a stream's line is written when it ends),
installed outermost so it sees every answer, the door's refusals included. Each line is an INFO record of the
``agent_signal.access`` logger whose fields (JSON keys in the structured log) are ``method``, ``path``,
``status``, ``duration_ms``, ``credential``, ``userId`` (user tokens only) and ``tenant``:

* ``path`` is the route's template (``/v1/users/{user_id}``), never the path as sent: paths name users, scopes
  and sessions. A request refused before routing (a 401) is matched against the routes for its template; a
  path no route matches is ``(no route)``. The query string is never logged (it may carry secrets).
* ``credential`` is the id of the credential the auth middleware resolved (an API key's id, ``bootstrap``,
  ``local``, and for a user token the id of the key that minted it), ``null`` when the request had none or was
  refused before auth. The ``Authorization`` header is never read here.
* ``userId`` is a user token's user; the log's privacy processor writes it as a pseudonym
  (worker/telemetry/log_privacy.py), as every line names a user.
* ``status`` is 500 when the app raised before answering (the exception propagates unchanged).

uvicorn's own access log stays off (``agent-signal web`` runs uvicorn at ``warning``): it would print the raw
request line, query string included.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any

from fastapi import FastAPI
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "ACCESS_LOGGER",
    "NO_ROUTE",
    "AccessLog",
    "access_fields",
    "flat_routes",
    "install_access_log",
    "route_template",
]

ACCESS_LOGGER = "agent_signal.access"

log = logging.getLogger(ACCESS_LOGGER)


NO_ROUTE = "(no route)"


def route_template(scope: Scope, routes: Sequence[Any] = ()) -> str:
    """The template of the route that served (or would serve) the request; never the path as sent."""
    route = scope.get("route")
    template = getattr(route, "path_format", None)
    if isinstance(template, str) and template:
        return template
    path = scope.get("path", "")
    for candidate in routes:
        if candidate.path_regex.match(path):
            return str(candidate.path_format)
    return NO_ROUTE


def flat_routes(routes: Iterable[Any]) -> list[Any]:
    """Every route with a template (``path_regex``, ``path_format``), inside included routers and mounts too
    (FastAPI keeps an included router as one entry whose ``effective_candidates()`` are its routes)."""
    out: list[Any] = []
    for route in routes:
        if hasattr(route, "path_regex") and isinstance(getattr(route, "path_format", None), str):
            out.append(route)
        elif callable(getattr(route, "effective_candidates", None)):
            out += flat_routes(route.effective_candidates())
        elif isinstance(getattr(route, "routes", None), list):
            out += flat_routes(route.routes)
    return out


def access_fields(
    scope: Scope, status: int, duration_ms: float, routes: Sequence[Any] = ()
) -> dict[str, Any]:
    """The fields of one request's line (nothing from headers, the query string or the path as sent)."""
    principal = scope.get("state", {}).get("principal")
    user_id = getattr(principal, "user_id", None)
    credential = getattr(principal, "credential_id", None)
    if user_id and isinstance(credential, str):  # a user token's id is "<issuer>:<userId>"
        credential = credential.removesuffix(f":{user_id}")
    fields: dict[str, Any] = {
        "method": scope.get("method", ""),
        "path": route_template(scope, routes),
        "status": status,
        "duration_ms": round(duration_ms, 1),
        "credential": credential,
        "tenant": getattr(principal, "tenant", None),
    }
    if user_id:
        fields["userId"] = user_id
    return fields


class AccessLog:
    """Log one line per HTTP request when its response has been sent (or the app failed)."""

    def __init__(self, app: ASGIApp, routes: Sequence[BaseRoute] = ()) -> None:
        self.app = app
        self.app_routes = routes  # the app's, to name the route of a request refused before routing
        self._flat: list[Any] | None = None

    @property
    def routes(self) -> list[Any]:
        if self._flat is None:  # on first use: every route has been added by then
            self._flat = flat_routes(self.app_routes)
        return self._flat

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            fields = access_fields(scope, status, (time.perf_counter() - started) * 1000, self.routes)
            log.info(
                "%s %s %s %.1fms",
                fields["method"],
                fields["path"],
                fields["status"],
                fields["duration_ms"],
                extra=fields,
            )


def install_access_log(app: FastAPI) -> None:
    """Add the access log; call it after every other middleware so it runs first (outermost)."""
    app.add_middleware(AccessLog, routes=app.router.routes)
