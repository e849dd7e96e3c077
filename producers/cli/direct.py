"""The verbs that work on the stack's Redis directly (not over HTTP): its settings and a producer on it."""

from __future__ import annotations

from typing import Any

__all__ = ["direct_producer", "stack_settings"]


def stack_settings() -> Any:
    """The settings from the environment (imported when a verb needs them: the CLI starts without the engine)."""
    from worker.settings import load_settings

    return load_settings()


def direct_producer(tenant: str = "default") -> Any:
    """A producer on the stack's Redis, bound to ``tenant`` (``--tenant``; direct access is the operator's)."""
    from producers.sdk.producer import Producer

    return Producer(stack_settings(), tenant=tenant)
