"""Who is calling: the :class:`Principal` a request's credential resolved to, and the route guard.

The auth middleware (``producers/http/access/auth.py``) resolves the ``Authorization: Bearer …`` credential once per
request and leaves a Principal on ``request.state.principal``; every route declares what it needs with
``Depends(require(GRANT))`` (the security walk in ``tests/security`` fails a route that declares nothing).

Grants, and which credential holds them:

==========  =====================================================================================
grant       who
==========  =====================================================================================
``ingest``  ``ingest``, ``operate`` and ``admin`` keys; user tokens (their events carry their userId)
``read``    ``read``, ``operate`` and ``admin`` keys; user tokens (only their own user's data)
``operate`` ``operate`` and ``admin`` keys; user tokens (only their own user's data)
``admin``   ``admin`` keys (keys of their own tenant)
==========  =====================================================================================

A ``metrics`` key holds none of them: it reads only the operations surfaces (``/metrics``,
``/metrics/state``, ``/v1/backlog``, the OpenAPI document and the docs pages, ``/readyz``'s detail; see
producers/http/access/ops.py), and every other route answers it 403.

A route that serves user-owned data (receipts, memories, skills, conversations, sessions) also calls
:meth:`Principal.owns_user` / :func:`user_of` so that a user token reaches only its own user.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from fastapi import Request

from producers.http.web_common import producer_of
from worker.keys.layout import Keys
from worker.ops.roles import KeyRole

__all__ = [
    "GRANTS",
    "LOCAL_PRINCIPAL",
    "Forbidden",
    "Grant",
    "NotFound",
    "Principal",
    "Role",
    "Unauthenticated",
    "check_user",
    "principal_of",
    "public",
    "require",
    "tenant_keys",
]

Role = Literal[KeyRole, "user"]  # a user token's role is "user"; a key holds one of ROLES
Grant = Literal["ingest", "read", "operate", "admin"]

GRANTS: dict[Role, frozenset[Grant]] = {
    "ingest": frozenset({"ingest"}),
    "read": frozenset({"read"}),
    "operate": frozenset({"ingest", "read", "operate"}),
    "admin": frozenset({"ingest", "read", "operate", "admin"}),
    "metrics": frozenset(),  # the operations surfaces only (producers/http/access/ops.py)
    "user": frozenset({"ingest", "read", "operate"}),
}


class Unauthenticated(Exception):
    """401: no credential, or one that is unknown, revoked, expired or malformed."""


class Forbidden(Exception):
    """403: a valid credential without the grant the route needs."""


class NotFound(Exception):
    """404: the resource is not the caller's (another tenant's, or another user's) or does not exist."""


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller: its tenant, role, and for a user token the one ``user_id`` it may touch."""

    tenant: str
    role: Role
    credential_id: str
    user_id: str | None = None

    def has(self, grant: Grant) -> bool:
        return grant in GRANTS[self.role]

    @property
    def is_user(self) -> bool:
        return self.role == "user"

    @property
    def actor(self) -> str:
        """Who the audit and the access log name: the credential id; for a user token (id ``<issuer>:<userId>``)
        ``user-token:<issuer>``, without the user's id, which an erasure must not leave in the append-only
        audit stream (a review: a user's own erasure named them there)."""
        if self.user_id is None:
            return self.credential_id
        return "user-token:" + self.credential_id.removesuffix(f":{self.user_id}")

    def owns_user(self, user_id: str | None) -> bool:
        """A key reaches every user of its tenant; a user token only its own."""
        return self.user_id is None or user_id == self.user_id


LOCAL_PRINCIPAL = Principal(tenant="default", role="admin", credential_id="local")
"""Who a caller is when no credential is configured (loopback only): the ``default`` tenant's admin."""


def principal_of(request: Request) -> Principal:
    """The principal the auth middleware resolved (LOCAL_PRINCIPAL when auth is off)."""
    principal = getattr(request.state, "principal", None)
    if principal is None:
        raise Unauthenticated("missing bearer credential (Authorization: Bearer <key or token>)")
    if not isinstance(principal, Principal):  # pragma: no cover - the middleware sets nothing else
        raise Unauthenticated("unrecognised credential")
    return principal


def require(grant: Grant, *, users: bool = False) -> Callable[[Request], Principal]:
    """A route dependency: the caller's Principal when it holds ``grant``; else 401 or 403.

    ``users``: whether user tokens may call the route at all (routes over one user's data: the route then
    checks :meth:`Principal.owns_user`). The returned callable carries ``grant`` as
    ``__agent_signal_grant__`` (and ``users`` as ``__agent_signal_users__``) so the security walk reads every
    route's requirement from the route table."""

    def guard(request: Request) -> Principal:
        principal = principal_of(request)
        if not principal.has(grant):
            raise Forbidden(f"this credential (role {principal.role}) lacks the {grant!r} grant")
        if principal.is_user and not users:
            raise Forbidden(
                "a user token reaches only its own user's receipts, memories, skills and sessions"
            )
        return principal

    guard.__agent_signal_grant__ = grant  # type: ignore[attr-defined]
    guard.__agent_signal_users__ = users  # type: ignore[attr-defined]
    guard.__name__ = f"require_{grant}"
    return guard


def check_user(principal: Principal, user_id: str | None, what: str) -> None:
    """404 (never 403: existence is not revealed) when a user token asks for another user's ``what``."""
    if not principal.owns_user(user_id):
        raise NotFound(f"no {what} for user {user_id!r}")


def tenant_keys(request: Request) -> Keys:
    """The caller's tenant's key builder (the tenant comes from the credential, never from the request)."""
    return producer_of(request).store.keys.for_tenant(principal_of(request).tenant)


def public() -> None:
    """A route dependency marking a route as open to anyone (health, the static UI shell): the security
    walk reads the marker and checks that the route serves no tenant data."""


public.__agent_signal_grant__ = "public"  # type: ignore[attr-defined]
