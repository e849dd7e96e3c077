"""Who may touch an agent session: the router-level guard of every ``/v1/sessions/{sessionId}`` route.

Reads (GET) need ``read``, everything else ``operate``. Keys reach every session of their tenant (the stores
are bound to the caller's tenant, so another tenant's session id simply does not exist here). A user token
reaches only sessions whose settings name its user: a ``PUT`` under ``/v1/sessions/{id}`` claims a session that
does not exist yet for that user (atomically: of two tokens racing, one wins), and any other session (another
user's, or one a key created without a user) answers 404, its existence not revealed. The claim is made once the
body is valid (:func:`session_body`, which every such ``PUT`` takes: ``tests/security/door/test_user_tokens.py``
checks the routes), so a request refused for its body leaves the id unclaimed.


It also holds what every session route shares: the session-id check, a checked body, the answers to a full
session, and the source event a changing tool call records.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

from fastapi import Request
from fastapi.responses import JSONResponse
from pydantic import AfterValidator, BaseModel, WithJsonSchema
from pydantic_core import PydanticCustomError
from redis.exceptions import RedisError
from starlette.concurrency import run_in_threadpool

from producers.http.access.principal import Forbidden, Grant, NotFound, Principal, principal_of, tenant_keys
from producers.http.records import enqueue_record, refused
from producers.http.web_common import error_response, parse_body, producer_of
from sessions.function_store import FunctionStore
from sessions.ids import SESSION_ID, SESSION_ID_RULE, session_id_problem
from sessions.scripts import SessionScripts
from sessions.store import (
    ContentionError,
    SessionFull,
    SessionLimits,
    SessionStore,
    TooManySessions,
    UserQuotaExceeded,
    session_scope,
)

__all__ = ["SESSION_ID", "SESSION_ID_RULE", "SessionId", "function_store", "session_access", "session_store"]


def check_session_id(value: str) -> str:
    """``value`` when it is a session id; else pydantic's ``invalid_id`` (a 422 naming ``sessionId``)."""
    if session_id_problem(value) is not None:
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
    owner = session_store(request).get_settings(session_id).user_id
    if owner is None and request.method == "PUT":
        request.state.session_claim = session_id  # claimed by session_body once the body is valid
        return principal
    if owner == principal.user_id:
        return principal
    raise NotFound(f"no session {session_id!r}")


def claim_pending(request: Request) -> None:
    """Make the session :func:`session_access` left unowned for a user token's PUT that user's (a new session:
    theirs from its first write on); NotFound when it exists meanwhile and is not theirs (another token won)."""
    session_id: str | None = getattr(request.state, "session_claim", None)
    if session_id is None:
        return
    request.state.session_claim = None
    user_id = principal_of(request).user_id
    if user_id is None:  # only ever set for user tokens
        return
    store = session_store(request)
    if not store.claim(session_id, user_id) and store.get_settings(session_id).user_id != user_id:
        raise NotFound(f"no session {session_id!r}")


session_access.__agent_signal_grant__ = "session"  # type: ignore[attr-defined]
session_access.__agent_signal_users__ = True  # type: ignore[attr-defined]


def session_full(exc: SessionFull, field: str | None = None) -> JSONResponse:
    """A write over one of the session's caps (nothing of it was stored): 413 naming the field (the store's,
    else the route's ``field``); over the user's storage quota or sessions, 429 ``quota_exceeded`` (Retry-After
    when some of the user's data expires)."""
    if isinstance(exc, UserQuotaExceeded | TooManySessions):
        response = error_response(429, "quota_exceeded", str(exc), exc.field)
        if isinstance(exc, UserQuotaExceeded) and exc.retry_after_s:
            response.headers["Retry-After"] = str(exc.retry_after_s)
        return response
    return error_response(413, "session_full", str(exc), exc.field or field)


def bad_session(session_id: str) -> JSONResponse | None:
    if session_id_problem(session_id) is None:
        return None
    return error_response(422, "invalid_field", f"sessionId must be {SESSION_ID_RULE}", "sessionId")


B = TypeVar("B", bound=BaseModel)


Precheck = Callable[[Request, str, B], JSONResponse | None]
"""What a route refuses of a valid body before anything is written (its other path parameters, a size cap, a
field naming another user): the refusal, or None."""


def session_body(
    model: type[B], precheck: Precheck[B] | None = None
) -> Callable[[str, Request], Awaitable[B | JSONResponse]]:
    """A FastAPI dependency: a checked session id, then the body as ``model`` and the route's ``precheck`` of it;
    else the answer naming why. Only then is the claim a user token's PUT left pending made
    (:func:`claim_pending`), so a request the route refuses claims nothing. (FastAPI runs this before it checks
    the route's own path parameters: a PUT route with more of them checks them in its ``precheck``.)"""

    async def checked_session_body(session_id: SessionId, request: Request) -> B | JSONResponse:
        if (bad := bad_session(session_id)) is not None:
            return bad
        body = await parse_body(request, model)
        if isinstance(body, JSONResponse):
            return body
        if precheck is not None and (refused := precheck(request, session_id, body)) is not None:
            return refused
        await run_in_threadpool(claim_pending, request)
        return body

    return checked_session_body


def record_event(
    request: Request, session_id: str, source_type: str, source_id: str, payload: dict[str, Any]
) -> str | None:
    """Every tool call that changes the session is also a source event on the session's scope. Called after the
    change: None, or the code of the record's refusal for the answer's ``Agent-Signal-Record-Error``
    (producers/http/records.py): ``session_gone`` when the session was erased since the change, or (a user
    token's) erased and claimed by another user, whose id the record would carry. A key's change has no user
    to compare: a session a key changed, erased and claimed again in the moment before its record carries the
    new owner's id. ``source_id`` (``<kind>:<session>:<seq>``) gets the session's incarnation
    before its sequence: the sequence starts again with a session made again under the same id."""
    try:
        identity = session_store(request).record_identity(session_id)
    except (RedisError, ContentionError) as exc:  # the change is made: a store failing now is the record's
        return refused(request, source_type, "store_unavailable", f" ({type(exc).__name__})")
    if identity is None:  # erased since the change (which the erasure took too): no record without its user
        return refused(request, source_type, "session_gone", "")
    settings, incarnation = identity
    caller = principal_of(request).user_id
    if caller is not None and settings.user_id != caller:  # erased since, and the id claimed by another user:
        # the change was the caller's, not theirs (record_identity gave their session its token: harmless)
        return refused(request, source_type, "session_gone", "")
    head, _, seq = source_id.rpartition(":")
    event: dict[str, Any] = {
        "sourceType": source_type,
        "sourceId": f"{head}:{incarnation}:{seq}",
        "scopeKey": session_scope(session_id),
        "payload": {"sessionId": session_id, **payload},
    }
    for key, value in (("userId", settings.user_id), ("agentId", settings.agent_id)):
        if value:
            event[key] = value
            event["payload"][key] = value
    if settings.topic_id:
        event["payload"]["topicId"] = settings.topic_id
    return enqueue_record(request, event, what=source_type)
