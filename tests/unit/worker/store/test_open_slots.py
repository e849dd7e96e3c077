"""Open slots read from one node's ``CLUSTER NODES``: only its own (``myself``) line, both directions."""

from __future__ import annotations

from worker.store.server.open_slots import parse_open_slots

NODES = """\
aaa 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460 [11304->-bbb] [42-<-ccc]
bbb 127.0.0.1:7002@17002 master - 0 1 2 connected 5461-10922 [11304-<-aaa]
ccc 127.0.0.1:7003@17003 master - 0 1 3 connected 10923-16383
"""


def test_migrating_and_importing_slots_of_the_node_itself() -> None:
    """``[slot->-id]`` is a slot leaving this node, ``[slot-<-id]`` one arriving; peers' lines are not read."""
    assert parse_open_slots(NODES) == [
        (11304, "127.0.0.1:7001", "127.0.0.1:7002"),
        (42, "127.0.0.1:7003", "127.0.0.1:7001"),
    ]


def test_a_node_with_no_open_slot_reports_none() -> None:
    """Plain slot ranges are ownership, not moves."""
    assert parse_open_slots(NODES.replace(" [11304->-bbb] [42-<-ccc]", "")) == []
