"""The web process's access log: one structured line per HTTP request, ``install_access_log(app)``.

A pure ASGI middleware (response streams pass through untouched; a stream's line is written when it ends),
installed outermost so it sees every answer, the door's refusals included. Each line is an INFO record of the
``agent_signal.access`` logger whose fields (JSON keys in the structured log) are ``method``, ``path``,
``status``, ``duration_ms``, ``credential`` and ``tenant``:

* ``path`` is the ASGI path alone: never the query string, which may carry secrets (``?token=…``).
* ``credential`` is the id of the credential the auth middleware resolved (an API key's ``as_…`` id,
  ``bootstrap``, ``local``, ``<issuer>:<userId>`` for a user token), ``null`` when the request had none or was
  refused before auth. The ``Authorization`` header is never read here.
* ``status`` is 500 when the app raised before answering (the exception propagates unchanged).

uvicorn's own access log stays off (``agent-signal web`` runs uvicorn at ``warning``): it would print the raw
request line, query string included.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["ACCESS_LOGGER", "AccessLog", "access_fields", "install_access_log"]

ACCESS_LOGGER = "agent_signal.access"

log = logging.getLogger(ACCESS_LOGGER)


def access_fields(scope: Scope, status: int, duration_ms: float) -> dict[str, Any]:
    """The fields of one request's line (nothing from headers or the query string)."""
    principal = scope.get("state", {}).get("principal")
    return {
        "method": scope.get("method", ""),
        "path": scope.get("path", ""),
        "status": status,
        "duration_ms": round(duration_ms, 1),
        "credential": getattr(principal, "credential_id", None),
        "tenant": getattr(principal, "tenant", None),
    }


class AccessLog:
    """Log one line per HTTP request when its response has been sent (or the app failed)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

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
            fields = access_fields(scope, status, (time.perf_counter() - started) * 1000)
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
    app.add_middleware(AccessLog)
