"""Declared source types."""

from __future__ import annotations

from worker.core.source_types import AGENT_SIGNAL_SOURCE_TYPES, LOBEHUB_SOURCE_TYPES, SourceTypePolicy


def test_lobehub_has_seventeen() -> None:
    """All 17 of LobeHub's types are declared, plus ours."""
    assert len(set(LOBEHUB_SOURCE_TYPES)) == 17
    assert {"chat.request", "agent.signal.emitted", "agent.dmail.sent"} <= AGENT_SIGNAL_SOURCE_TYPES


def test_policy() -> None:
    """Unknown types are refused unless allowed or declared extra."""
    assert SourceTypePolicy().accepts("agent.user.message")
    assert not SourceTypePolicy().accepts("made.up")
    assert SourceTypePolicy(extra=["made.up"]).accepts("made.up")
    assert SourceTypePolicy(allow_unknown=True).accepts("made.up")
