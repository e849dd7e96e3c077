"""Handler registration: ``define_source_handler`` & co., policies as ordered bundles, exact-type registries.

A handler is a plain function ``(node, ctx) -> HandlerResult``; it never touches Celery. A :class:`Policy`
is an ordered bundle of handler definitions; the runtime installs a list of policies in list order, and
for each node type runs the matching handlers in that registration order (LobeHub's
``runtime/middleware.ts``). Matching is by exact type string: no wildcards.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from worker.core.nodes import Action, HandlerResult, Signal, Source

if TYPE_CHECKING:
    from worker.chain.context import HandlerContext

__all__ = [
    "HandlerDef",
    "Policy",
    "Registry",
    "check_takes",
    "define_action_handler",
    "define_signal_handler",
    "define_source_handler",
]

HandlerKind = Literal["source", "signal", "action"]
N = TypeVar("N", Source, Signal, Action)
HandlerFn = Callable[[Any, "HandlerContext"], HandlerResult]


@dataclass(frozen=True, slots=True)
class HandlerDef:
    """One registered handler: what it listens to, its id, and the function."""

    kind: HandlerKind
    listen: tuple[str, ...]
    id: str
    handle: HandlerFn
    # Batch-safe: the handler reads nothing that an earlier event of its scope writes, and its only effects
    # are staged (ctx.effects, the outbox). Chains made only of such handlers commit in batches (worker/drain/batch.py).
    batch_safe: bool = False


def check_takes(function: object, count: int, what: str, shape: str) -> None:
    """A TypeError naming ``what`` unless ``function`` can be called with ``count`` positional arguments (its
    own signature, not a wrapped one's: a decorator's ``*args`` takes them); ``shape`` says what it should take.
    A builtin without a signature is taken on trust."""
    if not callable(function):
        raise TypeError(f"{what} must be a function taking {shape}, not {function!r}")
    try:
        signature = inspect.signature(function, follow_wrapped=False)
    except ValueError:
        return
    try:
        signature.bind(*([None] * count))
    except TypeError:
        name = getattr(function, "__name__", repr(function))
        raise TypeError(f"{what} must take {shape}; {name}{signature} does not") from None


def _define(
    kind: HandlerKind, listen: str | Iterable[str], id: str, handle: HandlerFn | None, batch_safe: bool
) -> HandlerDef:
    if handle is None or not callable(handle):
        raise TypeError(f"Missing handler function for define_{kind}_handler call.")
    types = (listen,) if isinstance(listen, str) else tuple(listen)
    if not types:
        raise ValueError(f"define_{kind}_handler({id!r}) listens to no type")
    # every event would fail the same way, retried to the DLQ: say so at load instead
    check_takes(handle, 2, f"define_{kind}_handler({id!r}): its function", "(node, ctx)")
    return HandlerDef(kind=kind, listen=types, id=id, handle=handle, batch_safe=batch_safe)


def define_source_handler(
    listen: str | Iterable[str],
    id: str,
    handle: Callable[[Source, HandlerContext], HandlerResult],
    *,
    batch_safe: bool = False,
) -> HandlerDef:
    """Register a handler for source events of the listed types (``batch_safe``: see :class:`HandlerDef`)."""
    return _define("source", listen, id, handle, batch_safe)


def define_signal_handler(
    listen: str | Iterable[str],
    id: str,
    handle: Callable[[Signal, HandlerContext], HandlerResult],
    *,
    batch_safe: bool = False,
) -> HandlerDef:
    """Register a handler for signals of the listed types (``batch_safe``: see :class:`HandlerDef`)."""
    return _define("signal", listen, id, handle, batch_safe)


def define_action_handler(
    listen: str | Iterable[str],
    id: str,
    handle: Callable[[Action, HandlerContext], HandlerResult],
    *,
    batch_safe: bool = False,
) -> HandlerDef:
    """Register an action handler; it should return an ExecutorResult (runs once per idempotency key)."""
    return _define("action", listen, id, handle, batch_safe)


@dataclass(frozen=True, slots=True)
class Policy:
    """A named, ordered bundle of handlers."""

    name: str
    handlers: Sequence[HandlerDef]


class DuplicateActionHandler(ValueError):
    """Two handlers of one action type: an action runs once, under one idempotency lane (the second never would)."""


@dataclass(slots=True)
class Registry:
    """Three maps from exact type to handlers, in registration order."""

    source: dict[str, list[HandlerDef]] = field(default_factory=dict)
    signal: dict[str, list[HandlerDef]] = field(default_factory=dict)
    action: dict[str, list[HandlerDef]] = field(default_factory=dict)

    @classmethod
    def from_policies(cls, policies: Sequence[Policy]) -> Registry:
        registry = cls()
        for policy in policies:
            for handler in policy.handlers:
                registry.register(handler)
        return registry

    def register(self, handler: HandlerDef) -> None:
        table = getattr(self, handler.kind)
        for node_type in handler.listen:
            taken = table.get(node_type, [])
            if handler.kind == "action" and taken:
                # an action's idempotency lane is the action's, not the handler's: a second handler would be
                # answered the first one's stored result and never run
                raise DuplicateActionHandler(
                    f"action type {node_type!r} has two handlers, {taken[0].id!r} and {handler.id!r}: an action "
                    "runs once, under one handler"
                )
            table.setdefault(node_type, []).append(handler)

    def match(self, kind: HandlerKind, node_type: str) -> list[HandlerDef]:
        return list(getattr(self, kind).get(node_type, ()))
