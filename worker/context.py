"""What a handler receives besides its node: the clock, the scope, staged effects and services.

``ctx.effects`` is how an action handler makes a Redis side effect *exactly once*: the commands it stages
are applied in one server-side script together with the action's idempotency mark, and only if the lane is
still unmarked and our fencing number is still current. A handler whose effect lives elsewhere (HTTP,
a database) performs it itself and gets at-least-once semantics, bounded by the idempotency lane (mark
only after ``applied``), and should pass ``ctx.idempotency_key`` on to that system.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from worker.nodes import Action, ExecutorResult

__all__ = ["ActionPort", "EffectBuffer", "HandlerContext"]

RedisArg = str | int | float | bytes


@dataclass(slots=True)
class EffectBuffer:
    """Redis commands staged by an action handler, applied atomically with the idempotency mark."""

    commands: list[list[RedisArg]] = field(default_factory=list)

    def call(self, *args: RedisArg) -> None:
        """Stage one Redis command (``ctx.effects.call("HSET", key, "f", "v")``); the first key is ``args[1]``."""
        if len(args) < 2:
            raise ValueError("an effect needs a command and a key")
        self.commands.append(list(args))

    def incr(self, key: str, amount: int = 1) -> None:
        self.call("INCRBY", key, amount)

    def clear(self) -> None:
        self.commands.clear()


class ActionPort(Protocol):
    """How the scheduler reaches idempotency storage and the lease; Redis-backed in the worker."""

    def lookup(self, action: Action, idempotency_key: str) -> ExecutorResult | None:
        """The stored result of an already-applied action with this key, else None."""

    def commit(
        self, action: Action, idempotency_key: str, result: ExecutorResult, effects: EffectBuffer
    ) -> bool:
        """Apply ``effects`` and mark the lane atomically; False when another holder already applied it."""

    def ensure_live(self) -> None:
        """Raise LeaseLost when the scope lease is no longer ours."""


@dataclass(slots=True)
class HandlerContext:
    """Per-node context (LobeHub's RuntimeProcessorContext, plus staged effects and services)."""

    scope_key: str
    node_timestamp: int
    attempt: int = 1
    max_attempts: int = 1
    idempotency_key: str | None = None
    effects: EffectBuffer = field(default_factory=EffectBuffer)
    services: Mapping[str, Any] = field(default_factory=dict)

    def now(self) -> int:
        """The node's own timestamp (fixed for every handler of the node), in ms."""
        return self.node_timestamp
