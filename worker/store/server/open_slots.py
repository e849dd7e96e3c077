"""Hash slots left open on a Redis Cluster: MIGRATING on one master, IMPORTING on another.

``redis-cli --cluster reshard`` (or ``rebalance``) opens a slot, moves its keys, then gives it to the target.
While it is open every request of the slot's tenant that touches keys on both sides is refused (TRYAGAIN, 503
at the door), so a move stopped half-way (the tool killed, a node restarted) refuses that tenant until an
operator runs ``redis-cli --cluster fix``. A master shows its own open slots in its ``myself`` line of
``CLUSTER NODES``: ``[slot->-<target id>]`` (migrating) and ``[slot-<-<source id>]`` (importing).

A slot being moved right now looks the same, so :func:`read_open_slots` also says how long the source's key
count of the slot has not changed as this process saw it (``still_s``): a move under way keeps lowering it,
a move left half-done does not. worker/store/server/safety.py turns that into a ``cluster`` entry on ``/readyz``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["OpenSlot", "parse_open_slots", "read_open_slots"]


@dataclass(frozen=True, slots=True)
class OpenSlot:
    """One slot open between two masters (``host:port``), its keys still on the source, and how long that
    count stood still (0 the first time this process sees the slot open)."""

    slot: int
    source: str
    target: str
    keys_on_source: int = 0
    still_s: float = 0.0

    def describe(self) -> str:
        return f"slot {self.slot} is open (migrating from {self.source} to {self.target}, {self.keys_on_source} keys left)"


def parse_open_slots(nodes_text: str) -> list[tuple[int, str, str]]:
    """``(slot, source, target)`` for every open slot in the ``myself`` line of one node's ``CLUSTER NODES``
    (addresses as ``host:port``)."""
    lines = [line.split() for line in nodes_text.splitlines() if len(line.split()) >= 8]
    address = {fields[0]: fields[1].split("@", 1)[0] for fields in lines}
    out: list[tuple[int, str, str]] = []
    for fields in lines:
        if "myself" not in fields[2].split(","):
            continue
        me = address[fields[0]]
        for item in fields[8:]:
            if "->-" in item:
                slot, peer = item.strip("[]").split("->-", 1)
                out.append((int(slot), me, address.get(peer, peer)))
            elif "-<-" in item:
                slot, peer = item.strip("[]").split("-<-", 1)
                out.append((int(slot), address.get(peer, peer), me))
    return out


_seen_lock = threading.Lock()
_seen: dict[
    tuple[int, str, str], tuple[int, float]
] = {}  # open slot -> (keys on source, since when unchanged)


def read_open_slots(cluster: Any, primaries: Iterable[Any]) -> tuple[OpenSlot, ...]:
    """The open slots the ``primaries`` (ClusterNodes of ``cluster``, a RedisCluster) report, each counted on
    its source (CLUSTER COUNTKEYSINSLOT) and timed against what this process saw before."""
    by_address = {node.name: node for node in primaries}
    found: set[tuple[int, str, str]] = set()
    for node in by_address.values():
        text = cluster.get_redis_connection(node).execute_command("CLUSTER", "NODES")
        found.update(parse_open_slots(str(text)))
    now, out = time.monotonic(), []
    for slot, source, target in sorted(found):
        source_node = by_address.get(source)
        keys = (
            int(cluster.get_redis_connection(source_node).execute_command("CLUSTER", "COUNTKEYSINSLOT", slot))
            if source_node is not None
            else 0
        )
        with _seen_lock:
            before = _seen.get((slot, source, target))
            since = before[1] if before is not None and before[0] == keys else now
            _seen[(slot, source, target)] = (keys, since)
        out.append(OpenSlot(slot, source, target, keys, now - since))
    with _seen_lock:
        for gone in set(_seen) - found:
            del _seen[gone]
    return tuple(out)
