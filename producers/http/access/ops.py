"""Who may read the operations surfaces: ``/metrics``, ``/metrics/state``, ``/v1/backlog``, the OpenAPI document
and the docs pages, and ``/readyz``'s detail.

``AGENT_SIGNAL_OPS_OPEN=never`` (the default): a key of the ``default`` tenant with the ``metrics`` role (which
reads nothing else) or the ``read`` grant; their figures name every tenant, so another tenant's key is 403, and
user tokens never see them. ``always`` (``make run`` sets it) opens them to anyone. Nothing is decided by the
bind address or a caller's address: behind a reverse proxy on the same host every caller is loopback (the
removed ``loopback`` value opened them to the internet that way). ``/readyz`` answers anyone ``{"ready"}`` and
its status code (Kubernetes probes carry no credential); its ``checks`` go only to a caller that may read these.

The auth middleware (producers/http/access/auth.py) applies :func:`check_ops` to :data:`OPS_ROUTES` and the docs paths
before routing; the routes declare :func:`ops_access` (or :func:`ops_detail`) as well.
"""

from __future__ import annotations

from fastapi import Request

from producers.http.access.principal import Forbidden, Principal, Unauthenticated
from producers.http.settings import DoorSettings
from worker.keys.layout import DEFAULT_TENANT

__all__ = ["OPS_ROUTES", "check_ops", "may_read_ops", "ops_access", "ops_detail", "ops_open"]

OPS_ROUTES = ("/metrics", "/metrics/state", "/v1/backlog")


def ops_open(settings: DoorSettings) -> bool:
    """True when the operations surfaces answer without a credential (``AGENT_SIGNAL_OPS_OPEN=always``)."""
    return settings.ops_open == "always"


def check_ops(principal: Principal | None, settings: DoorSettings) -> None:
    """Raise Unauthenticated (no credential) or Forbidden unless ``principal`` may read the ops surfaces."""
    if ops_open(settings):
        return
    if principal is None:
        raise Unauthenticated("this operations endpoint needs a credential (a metrics key, or a read key)")
    if principal.is_user or not (principal.role == "metrics" or principal.has("read")):
        raise Forbidden("this operations endpoint needs a metrics key or a key with the read grant")
    if principal.tenant != DEFAULT_TENANT:  # deployment-wide figures name every tenant: the operator's only
        raise Forbidden("this operations endpoint is the operator's: it needs a key of the default tenant")


def may_read_ops(principal: Principal | None, settings: DoorSettings) -> bool:
    """Whether ``principal`` (None: no credential) may read the operations surfaces."""
    try:
        check_ops(principal, settings)
    except (Unauthenticated, Forbidden):
        return False
    return True


def _settings(request: Request) -> DoorSettings:
    settings: DoorSettings = request.app.state.auth.door  # the auth middleware's (set before startup)
    return settings


def ops_access(request: Request) -> Principal | None:
    """A route dependency for an operations surface (see the module docstring)."""
    principal = getattr(request.state, "principal", None)
    check_ops(principal, _settings(request))
    return principal


def ops_detail(request: Request) -> bool:
    """A route dependency for ``/readyz``, open to anyone: whether the caller may see the detail."""
    return may_read_ops(getattr(request.state, "principal", None), _settings(request))


ops_access.__agent_signal_grant__ = "ops"  # type: ignore[attr-defined]
ops_detail.__agent_signal_grant__ = "public"  # type: ignore[attr-defined]
