"""The engine's source-type policy: it names no source type; the plugins and the settings declare them."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.payload_schemas import shipped_plugins, shipped_source_types
from worker.core.source_types import SourceTypePolicy
from worker.settings import Settings

WORKER = Path(__file__).resolve().parents[4] / "worker"


def test_the_policy_admits_only_what_it_is_given() -> None:
    """With nothing declared nothing is admitted; declared types are, and ALLOW_UNKNOWN admits any."""
    assert not SourceTypePolicy().accepts("agent.user.message")
    assert SourceTypePolicy(extra=["made.up"]).accepts("made.up")
    assert not SourceTypePolicy(extra=["made.up"]).accepts("agent.user.message")
    assert SourceTypePolicy(allow_unknown=True).accepts("made.up")


def test_no_shipped_source_type_is_named_in_the_engine() -> None:
    """Issue 27 item 6: worker/ holds no source-type name of the shipped plugins (LobeHub's or ours)."""
    names = shipped_source_types(shipped_plugins(Settings(env="test")))
    assert len(names) == 22
    pattern = re.compile("|".join(re.escape(f'"{n}"') for n in names))
    found = [
        f"{path.relative_to(WORKER.parent)}: {match.group(0)}"
        for path in sorted(WORKER.rglob("*.py"))
        for match in pattern.finditer(path.read_text(encoding="utf-8"))
    ]
    assert found == []


def test_a_refused_type_is_answered_with_the_nearest_declared_one() -> None:
    """The load-time check said "did you mean"; the door did not: ``app.ticket.mesage`` got no hint."""
    import pytest

    from worker.intake.source_event import InvalidEvent, parse_event

    policy = SourceTypePolicy(extra=["app.ticket.message", "app.ticket.note"])
    event = {"sourceType": "app.ticket.mesage", "sourceId": "m1", "payload": {}}
    with pytest.raises(InvalidEvent) as refused:
        parse_event(event, policy)
    assert "unknown source type 'app.ticket.mesage' (did you mean 'app.ticket.message'? or" in str(
        refused.value
    )
    assert policy.nearest("zzz") is None
