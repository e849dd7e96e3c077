"""Who may touch an agent session: the router-level guard of every ``/v1/sessions/{sessionId}`` route.

Reads (GET) need ``read``, everything else ``operate``. Keys reach every session of their tenant (the stores
are bound to the caller's tenant, so another tenant's session id simply does not exist here). A user token
reaches only sessions whose settings name its user: ``PUT /v1/sessions/{id}`` claims a session that does not
exist yet for that user (atomically: of two tokens racing, one wins), and any other session (another user's,
or one a key created without a user) answers 404, its existence not revealed.
"""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import Request
from pydantic import AfterValidator, WithJsonSchema
from pydantic_core import PydanticCustomError

from producers.http.principal import Forbidden, Grant, NotFound, Principal, principal_of, tenant_keys
from producers.http.web_common import producer_of
from sessions.function_store import FunctionStore
from sessions.scripts import SessionScripts
from sessions.store import SessionLimits, SessionStore

__all__ = ["SESSION_ID", "SESSION_ID_RULE", "SessionId", "function_store", "session_access", "session_store"]

SESSION_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,200}$")
SESSION_ID_RULE = "1-200 of A-Z a-z 0-9 . _ : -"


def check_session_id(value: str) -> str:
    """``value`` when it is a session id; else pydantic's ``invalid_id`` (a 422 naming ``sessionId``)."""
    if SESSION_ID.match(value) is None:
        raise PydanticCustomError("invalid_id", "must be {rule}", {"rule": SESSION_ID_RULE})
    return value


SessionId = Annotated[
    str,
    AfterValidator(check_session_id),
    WithJsonSchema({"type": "string", "pattern": SESSION_ID.pattern}),
]
"""A session id as a path parameter: checked before any guard, claim or store call runs."""


def session_store(request: Request) -> SessionStore:
    """The caller's tenant's session store: a view over the process's one client and script registration."""
    scripts: SessionScripts | None = getattr(request.app.state, "session_scripts", None)
    base = producer_of(request).store
    if scripts is None:
        scripts = request.app.state.session_scripts = SessionScripts.register(base.client)
    limits: SessionLimits = (
        request.app.state.session_limits
    )  # producers/http/app.py, from the sessions' section
    return SessionStore(base.client, tenant_keys(request), limits, scripts=scripts)


def function_store(request: Request) -> FunctionStore:
    base = producer_of(request).store
    limits: SessionLimits = request.app.state.session_limits
    return FunctionStore(base.client, tenant_keys(request), limits=limits)


def session_access(request: Request, session_id: SessionId) -> Principal:
    """The router dependency: the grant the method needs, and a user token's ownership of the session. FastAPI
    checks ``session_id`` before calling it, so a claim is never written for an id the routes would refuse."""
    principal = principal_of(request)
    grant: Grant = "read" if request.method in ("GET", "HEAD") else "operate"
    if not principal.has(grant):
        raise Forbidden(f"this credential (role {principal.role}) lacks the {grant!r} grant")
    if principal.user_id is None:
        return principal
    store = session_store(request)
    owner = store.get_settings(session_id).user_id
    if owner is None and request.method == "PUT" and store.claim(session_id, principal.user_id):
        owner = principal.user_id  # a new session: this user's from its first write on
    if owner == principal.user_id:
        return principal
    raise NotFound(f"no session {session_id!r}")


session_access.__agent_signal_grant__ = "session"  # type: ignore[attr-defined]
session_access.__agent_signal_users__ = True  # type: ignore[attr-defined]
