"""The verbs that work on the stack's Redis directly (not over HTTP): its settings and a producer on it."""

from __future__ import annotations

from typing import Any

from producers.cli.reach.target import CliError

__all__ = ["direct_producer", "stack_settings"]


def stack_settings() -> Any:
    """The settings from the environment (imported when a verb needs them: the CLI starts without the engine)."""
    from worker.settings import load_settings

    return load_settings()


def direct_producer(tenant: str = "default") -> Any:
    """A producer on the stack's Redis, bound to ``tenant`` (``--tenant``; direct access is the operator's); a
    tenant name that is not one is a CliError naming ``--tenant`` (exit 2), before anything connects."""
    from producers.sdk.producer import Producer
    from worker.core.tenancy import BadTenant, check_tenant

    try:
        check_tenant(tenant)
    except BadTenant as exc:
        raise CliError(f"--tenant: {exc}") from None
    return Producer(stack_settings(), tenant=tenant)
