"""Tenant names and scope refs.

A tenant is the unit of isolation (one agent platform or workspace). Its name comes from the caller's
credential, never from a request body, and is part of every key it owns (``worker/keys/layout.py``). The engine names a
tenant's scope by a *scope ref*, ``<tenant>/<scopeKey>``: drain tasks carry it, and the engine-wide registries
(``scopes``, ``outbox-due``) hold it, so one worker fleet serves every tenant.

:func:`working_for` says whose work the code inside it does (a deliverer handed one tenant's outbox record, a
plugin task of one tenant): a plugin task published there carries the tenant in its message, so the task of a
tenant deleted meanwhile is dropped although its payload does not name it (worker/runtime/tasks.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache

__all__ = [
    "DEFAULT_TENANT",
    "TENANT_PATTERN",
    "BadTenant",
    "check_tenant",
    "scope_ref",
    "split_scope_ref",
    "work_tenant",
    "working_for",
]

TENANT_MAX_LEN = 63
TENANT_PATTERN = re.compile(rf"^[a-z0-9][a-z0-9_-]{{0,{TENANT_MAX_LEN - 1}}}$")
DEFAULT_TENANT = "default"
SCOPE_REF_SEPARATOR = "/"


class BadTenant(ValueError):
    """A tenant name outside ``[a-z0-9][a-z0-9_-]{0,62}``."""


def check_tenant(tenant: str) -> str:
    # a longer name is refused before the cache, so none is ever kept
    if not isinstance(tenant, str) or len(tenant) > TENANT_MAX_LEN or not _valid(tenant):
        raise BadTenant(f"tenant must match {TENANT_PATTERN.pattern} (got {tenant!r})")
    return tenant


@lru_cache(maxsize=4096)
def _valid(tenant: str) -> bool:
    """Remembered: a lone event's drain checks its tenant three times (its popped ref twice, its keys once).
    ``fullmatch``: the pattern's ``$`` alone would let a trailing newline through."""
    return TENANT_PATTERN.fullmatch(tenant) is not None


def scope_ref(tenant: str, scope_key: str) -> str:
    """The engine-wide name of a tenant's scope: ``<tenant>/<scopeKey>`` (drain tasks, ``scopes``, outbox-due).

    A tenant name holds no ``/``, so the first ``/`` splits it back (scope keys may contain ``/``)."""
    return f"{tenant}{SCOPE_REF_SEPARATOR}{scope_key}"


def split_scope_ref(ref: str) -> tuple[str, str]:
    """``(tenant, scopeKey)`` of a scope ref; raises BadTenant when it does not start with a tenant."""
    tenant, sep, scope_key = ref.partition(SCOPE_REF_SEPARATOR)
    if not sep or not scope_key:
        raise BadTenant(f"not a scope ref (<tenant>/<scopeKey>): {ref!r}")
    return check_tenant(tenant), scope_key


_WORK_TENANT: ContextVar[str | None] = ContextVar("agent_signal_work_tenant", default=None)


@contextmanager
def working_for(tenant: str | None) -> Iterator[None]:
    """The code inside does ``tenant``'s work (None: nobody's in particular)."""
    token = _WORK_TENANT.set(tenant)
    try:
        yield
    finally:
        _WORK_TENANT.reset(token)


def work_tenant() -> str | None:
    """The tenant whose work this is (:func:`working_for`), or None."""
    return _WORK_TENANT.get()
