"""The dedupe key and the event id derived from it."""

from __future__ import annotations

from worker.core.dedupe import dedupe_key, event_id_for


def test_key_has_no_timestamp() -> None:
    """The key is scope, type and id only."""
    assert (
        dedupe_key("topic:tpc_1", "agent.user.message", "msg_u1") == "topic:tpc_1:agent.user.message:msg_u1"
    )


def test_event_id_is_deterministic_and_distinct() -> None:
    """The same key gives the same id; different keys give different ids; ids are path-safe."""
    a = event_id_for("topic:tpc_1:agent.user.message:msg_u1")
    assert a == event_id_for("topic:tpc_1:agent.user.message:msg_u1")
    assert a != event_id_for("topic:tpc_2:agent.user.message:msg_u1")
    assert a.startswith("evt_") and len(a) == 28 and a[4:].isalnum()
