"""Redis memory per retained event, and which key family holds it.

On a private embedded Redis (:func:`bench._env.private_redis_url`, even when REDIS_URL is set: nothing else
writes to it) with a fresh key prefix, worker processes start and settle; then the empty baseline is taken
(``INFO memory`` ``used_memory``, and ``MEMORY USAGE`` of every key summed per family), N events over N/10
scopes are enqueued, and once the tenant's ``done`` counter has grown by N and the broker queue is empty
(deterministic waits, no sleeps) both are taken again. ``used_memory``'s growth divided by N is the figure;
the per-family sums say which family dominates, and what they do not cover (the keyspace's own hash tables,
expiry entries, allocator rounding) is shown as "not in any key".

Then "memory per receipt": the bench's events write no receipts, so N/10 receipts of the D-Mail shape
(policies/dmail.py) are appended the way a receipt action stages them (:func:`worker.store.receipts.receipt_effects`:
``SET NX EX`` of the body, its ``ZADD`` in LobeHub's user/agent/topic index, 10 receipts per index), and the
``used_memory`` growth is divided by their number.

A key's family is the part after the tenant prefix ``<prefix>t:<tenant>:`` up to the next ``:`` (``ev``,
``chain``, ``runs``, ``inbox``, ``receipts``, ...; ``docs/keys.md`` has the layout); engine-wide keys (after the
prefix alone: ``broker``, ``metrics``, ``workers``, ...) are marked ``(engine)``.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from redis import Redis

from bench._env import make_settings, private_redis_url, wait, workers
from bench.pipeline_bench import WORKER_PROCESSES, bench_events, drain_time_s, queue_empty
from producers import Producer
from worker.keys.layout import Keys
from worker.store.receipts import ReceiptStore

__all__ = ["Family", "ReceiptMemory", "RetainedMemory", "family_of", "receipt_memory", "retained_memory"]

BYTES_GOAL = 1500  # bytes per retained event (issue 29)
TOP_FAMILIES = 5  # rows printed; --json has every family
RECEIPTS_PER_INDEX = 10  # receipts per user/agent/topic index in the receipt measurement
USAGE_BATCH = 1000  # MEMORY USAGE commands per pipeline round trip

Row = tuple[str, str, str, str]


@dataclass(frozen=True)
class Family:
    """Growth of one key family over the measured run."""

    name: str
    keys: int
    bytes: int


@dataclass(frozen=True)
class ReceiptMemory:
    """``used_memory`` growth over ``receipts`` appended receipts (bodies and their indexes)."""

    receipts: int
    used_memory_delta: int

    @property
    def per_receipt(self) -> float:
        return self.used_memory_delta / self.receipts

    def row(self) -> Row:
        indexes = max(1, self.receipts // RECEIPTS_PER_INDEX)
        note = f"used_memory delta, {self.receipts:,} receipts (D-Mail shape) in {indexes:,} indexes"
        return ("memory per receipt", f"{self.per_receipt:,.0f} bytes", "", note)


@dataclass(frozen=True)
class RetainedMemory:
    """``used_memory`` growth over ``events`` retained events, and the families' share of it."""

    events: int
    scopes: int
    used_memory_delta: int
    families: list[Family]  # largest growth first
    receipts: ReceiptMemory | None = None

    @property
    def per_event(self) -> float:
        return self.used_memory_delta / self.events

    @property
    def unattributed(self) -> int:
        return self.used_memory_delta - sum(f.bytes for f in self.families)

    def rows(self) -> list[Row]:
        rows: list[Row] = [
            (
                "memory per retained event",
                f"{self.per_event:,.0f} bytes",
                "holds" if self.per_event <= BYTES_GOAL else "MISSED",
                f"used_memory delta, private Redis, {self.events:,} events / {self.scopes:,} scopes, all done "
                f"(goal <= {BYTES_GOAL:,} B, issue 29)",
            )
        ]
        for f in self.families[:TOP_FAMILIES]:
            rows.append((f"  of which {f.name}", f"{f.bytes / self.events:,.0f} bytes", "", self._share(f)))
        rows.append(
            (
                "  not in any key",
                f"{self.unattributed / self.events:,.0f} bytes",
                "",
                "keyspace tables, expiry entries, allocator rounding",
            )
        )
        if self.receipts is not None:
            rows.append(self.receipts.row())
        return rows

    def _share(self, f: Family) -> str:
        share = f.bytes / self.used_memory_delta * 100 if self.used_memory_delta else 0.0
        return f"{share:.0f}% of the delta, {f.keys:+,} keys (MEMORY USAGE)"

    def figures(self) -> dict[str, float]:
        out = {
            "memory_events": float(self.events),
            "memory_per_retained_event_bytes": self.per_event,
            "memory_used_delta_bytes": float(self.used_memory_delta),
            "memory_unattributed_bytes_per_event": self.unattributed / self.events,
        }
        for f in self.families:
            name = re.sub(r"[^a-z0-9]+", "_", f.name).strip("_")  # "metrics: (engine)" -> metrics_engine
            out[f"memory_family_{name}_bytes_per_event"] = f.bytes / self.events
        if self.receipts is not None:
            out["memory_per_receipt_bytes"] = self.receipts.per_receipt
            out["memory_receipts"] = float(self.receipts.receipts)
        return out


def family_of(key: str, prefix: str) -> str:
    """``ev:`` for ``<prefix>t:<tenant>:ev:<id>``, ``stats`` for ``<prefix>t:<tenant>:stats``,
    ``metrics: (engine)`` for ``<prefix>metrics:<name>``; ``(outside the prefix)`` otherwise."""
    if not key.startswith(prefix):
        return "(outside the prefix)"
    rest = key[len(prefix) :]
    engine = not rest.startswith("t:")
    if not engine:
        rest = rest[2:].partition(":")[2]
    head, colon, _ = rest.partition(":")
    return f"{head}{colon}{' (engine)' if engine else ''}"


def family_usage(client: Redis, prefix: str) -> dict[str, tuple[int, int]]:
    """Family -> (keys, bytes summed over ``MEMORY USAGE key SAMPLES 0``) for every key in the server."""
    keys = list(client.scan_iter(count=1000))
    totals: dict[str, list[int]] = {}
    for i in range(0, len(keys), USAGE_BATCH):
        pipe = client.pipeline(transaction=False)
        for key in keys[i : i + USAGE_BATCH]:
            pipe.memory_usage(key, samples=0)
        for key, used in zip(keys[i : i + USAGE_BATCH], pipe.execute(), strict=True):
            if used is not None:  # expired between SCAN and MEMORY USAGE
                entry = totals.setdefault(family_of(key, prefix), [0, 0])
                entry[0] += 1
                entry[1] += int(used)
    return {name: (count, size) for name, (count, size) in totals.items()}


def used_memory(client: Redis) -> int:
    return int(client.info("memory")["used_memory"])


def sample_receipt(i: int, created_at: int) -> dict[str, Any]:
    """A receipt as the D-Mail policy writes it (policies/dmail.py ``_plan_receipt``)."""
    return {
        "id": f"rx-{i}:context-rewind",
        "kind": "context",
        "status": "applied",
        "title": f"Context rewound to checkpoint {i % 7}",
        "detail": "Going forward, I prefer concise answers.",
        "sourceId": f"rx-{i}",
        "sourceType": "agent.dmail.sent",
        "userId": f"user-{i // RECEIPTS_PER_INDEX}",
        "agentId": "agent-1",
        "topicId": f"topic-{i // RECEIPTS_PER_INDEX}",
        "createdAt": created_at + i,
        "metadata": {"sessionId": f"session-{i // RECEIPTS_PER_INDEX}", "checkpointId": i % 7},
        "anchorMessageId": f"msg-{i}",
    }


def receipt_memory(client: Redis, prefix: str, receipts: int, *, ttl_s: int) -> ReceiptMemory:
    """Append ``receipts`` sample receipts under ``prefix`` and measure the ``used_memory`` growth."""
    store = ReceiptStore(client, Keys(prefix), ttl_s=ttl_s)
    before = used_memory(client)
    for i in range(receipts):
        store.append(sample_receipt(i, 1_796_000_000_000))
    return ReceiptMemory(receipts, used_memory(client) - before)


def retained_memory(events: int, scopes: int) -> RetainedMemory:
    """Measure ``events`` events over ``scopes`` scopes on a private Redis (see the module docstring)."""
    with private_redis_url() as url:
        settings = make_settings(url)
        client = Redis.from_url(url, decode_responses=True)
        producer = Producer(settings)
        batch = bench_events(events, scopes, "mem")
        with workers(settings, WORKER_PROCESSES):
            wait(lambda: queue_empty(client, settings), timeout_s=60)
            before_bytes = used_memory(client)
            before = family_usage(client, settings.key_prefix)
            drain_time_s(producer, batch)
            wait(lambda: queue_empty(client, settings), timeout_s=600)
            after_bytes = used_memory(client)
            after = family_usage(client, settings.key_prefix)
            # Before the workers' exit deletes the prefix: freeing 10,000 events meanwhile would make the
            # receipts' used_memory delta negative.
            receipts = receipt_memory(
                client, settings.key_prefix, max(1, events // 10), ttl_s=settings.receipt_retention_s
            )
        producer.close()
        client.close()
    keys: Counter[str] = Counter()
    size: Counter[str] = Counter()
    for name, (count, used) in after.items():
        keys[name] += count
        size[name] += used
    for name, (count, used) in before.items():
        keys[name] -= count
        size[name] -= used
    families = [Family(name, keys[name], size[name]) for name in size if size[name] or keys[name]]
    families.sort(key=lambda f: f.bytes, reverse=True)
    return RetainedMemory(events, scopes, after_bytes - before_bytes, families, receipts)
