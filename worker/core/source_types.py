"""Declared source types: LobeHub's 17 (``AGENT_SIGNAL_SOURCE_TYPES``) plus the ones Agent Signal adds.

An event whose ``sourceType`` is not declared is rejected at the door with ``unknown_source_type``, unless
``AGENT_SIGNAL_ALLOW_UNKNOWN_SOURCE_TYPES`` is true or the type is listed in
``AGENT_SIGNAL_EXTRA_SOURCE_TYPES``.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["AGENT_SIGNAL_SOURCE_TYPES", "LOBEHUB_SOURCE_TYPES", "OUR_SOURCE_TYPES", "SourceTypePolicy"]

LOBEHUB_SOURCE_TYPES: tuple[str, ...] = (
    "agent.execution.completed",
    "agent.execution.failed",
    "agent.nightly_review.requested",
    "agent.self_feedback_intent.declared",
    "agent.self_reflection.requested",
    "agent.user.message",
    "bot.message.merged",
    "client.gateway.error",
    "client.gateway.runtime_end",
    "client.gateway.step_complete",
    "client.gateway.stream_start",
    "client.runtime.complete",
    "client.runtime.start",
    "runtime.after_step",
    "runtime.before_step",
    "tool.outcome.completed",
    "tool.outcome.failed",
)

OUR_SOURCE_TYPES: tuple[str, ...] = (
    "chat.request",  # a chat request about to be routed (conversation signals)
    "agent.signal.emitted",  # an agent called the `signal` tool
    "agent.dmail.sent",  # an agent sent a D-Mail
    "agent.context.reverted",  # a pending D-Mail was applied at step end
    "agent.dmail.discarded",  # a pending D-Mail was discarded (rejection without feedback)
)

AGENT_SIGNAL_SOURCE_TYPES: frozenset[str] = frozenset(LOBEHUB_SOURCE_TYPES + OUR_SOURCE_TYPES)


class SourceTypePolicy:
    """Decides whether a source type is accepted."""

    def __init__(self, *, allow_unknown: bool = False, extra: Iterable[str] = ()) -> None:
        self.allow_unknown = allow_unknown
        self.known = AGENT_SIGNAL_SOURCE_TYPES | frozenset(extra)

    def accepts(self, source_type: str) -> bool:
        return self.allow_unknown or source_type in self.known
