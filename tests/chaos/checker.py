"""The history checker: from what the history plugin recorded, count lost events, effects applied twice,
order violations, fence rejections and stale commits, lost or doubled outbox effects; and the table."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from redis import Redis

from tests.chaos.history_plugin import HistoryKeys
from tests.chaos.receiver import Receipts
from worker.keys.layout import BucketKeys
from worker.outbox.relay import records_of_event

Accepted = tuple[str, str, int]  # (sourceId, scope, seq) of an accepted event


@dataclass
class History:
    """What the checker found for one scenario."""

    events: int = 0
    done: int = 0
    dead: int = 0
    expected_dead: int = 0  # the poisoned events: exactly these, and only these, must end dead
    dead_mismatch: int = 0  # healthy events that died, plus poisoned ones that did not
    lost: int = 0
    applied_twice: int = 0
    order_violations: int = 0
    fence_rejections: int = 0
    batched: int = 0  # events of runs of two or more that committed whole (the engine's batchedEvents)
    stale_commits: int = 0
    effects_lost: int = 0  # done events whose effect never reached the receiver (or was not delivered)
    effects_twice: int = 0  # events with more than one effect at the receiver (one key twice, or two keys)
    deliveries: int = 0  # raw deliveries (at least once: may exceed the effects)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (
            self.lost
            or self.applied_twice
            or self.order_violations
            or self.stale_commits
            or self.dead_mismatch
            or self.effects_lost
            or self.effects_twice
        )


def check_history(
    redis: Redis,
    prefix: str,
    accepted: dict[str, Accepted],
    *,
    poisoned: Collection[str] = (),
    receipts: Receipts | None = None,
    dump_dir: Path | None = None,
) -> History:
    """Audit the history of the ``accepted`` events on the run's Redis (and, given ``receipts``, their effects).

    dead: must be exactly the ``poisoned`` source ids (none elsewhere); lost: accepted, not dead, and not
    (done with its action applied); applied twice: an effect counter above 1; order: adjacent entries of a
    scope's applied-order (or commit-order) list whose seq does not grow; stale commits: a done commit whose
    fence is not the number its event was last taken with, or lower than a commit before it on the same
    scope; fence rejections: the engine's ``fenceRejected`` counter; effects lost: a done event without
    exactly one delivered outbox record and one effect at the receiver; effects twice: an event with more
    than one effect at the receiver."""
    keys = BucketKeys(prefix)
    history = HistoryKeys(keys.bucket_prefix)
    found = History(events=len(accepted))
    ids = list(accepted)
    pipe = redis.pipeline(transaction=False)
    for event_id in ids:
        pipe.hmget(keys.event(event_id), "state", "fence")
    records = dict(zip(ids, pipe.execute(), strict=True))
    states = {sid: records[event_id][0] for event_id, (sid, _, _) in accepted.items()}
    final_fence = {sid: records[event_id][1] or "" for event_id, (sid, _, _) in accepted.items()}
    _check_final(redis, history, states, set(poisoned), found)
    _check_order_and_fences(redis, history, accepted, final_fence, found)
    rejected, batched = redis.hmget(keys.stats, "fenceRejected", "batchedEvents")
    found.fence_rejections, found.batched = int(rejected or 0), int(batched or 0)
    if receipts is not None:
        _check_effects(redis, keys, accepted, states, receipts, found, dump_dir)
    return found


def _check_final(
    redis: Redis, history: HistoryKeys, states: dict[str, str | None], poisoned: set[str], found: History
) -> None:
    applied = {str(k): int(v) for k, v in redis.hgetall(history.applied).items()}
    committed = {str(k): int(v) for k, v in redis.hgetall(history.committed).items()}
    found.expected_dead = len(poisoned & set(states))
    for sid, state in states.items():
        if (state == "dead") != (sid in poisoned):
            found.dead_mismatch += 1
            found.problems.append(f"{'poisoned' if sid in poisoned else 'healthy'} {sid} ended {state}")
        if state == "dead":
            found.dead += 1
            continue
        if state == "done":
            found.done += 1
        if state != "done" or applied.get(sid, 0) < 1 or committed.get(sid, 0) < 1:
            found.lost += 1
            found.problems.append(f"lost {sid}: state={state} applied={applied.get(sid, 0)}")
    twice = {sid for sid, n in applied.items() if n > 1} | {sid for sid, n in committed.items() if n > 1}
    found.applied_twice = len(twice)
    found.problems += [f"applied twice: {sid}" for sid in sorted(twice)]


def _check_order_and_fences(
    redis: Redis,
    history: HistoryKeys,
    accepted: dict[str, Accepted],
    final_fence: dict[str, str],
    found: History,
) -> None:
    sid_of = {(scope, seq): sid for sid, scope, seq in accepted.values()}
    for scope in sorted({scope for _, scope, _ in accepted.values()}):
        seqs = [int(x) for x in redis.lrange(history.order(scope), 0, -1)]
        commits = [str(entry).split(":") for entry in redis.lrange(history.commit_order(scope), 0, -1)]
        for series in (seqs, [int(seq) for seq, _ in commits]):
            bad = sum(1 for a, b in itertools.pairwise(series) if b <= a)
            found.order_violations += bad
            if bad:
                found.problems.append(f"order {scope}: {series}")
        highest = 0
        for seq, fence in commits:
            stale = int(fence) < highest or final_fence.get(sid_of.get((scope, int(seq)), ""), fence) != fence
            highest = max(highest, int(fence))
            if stale:
                found.stale_commits += 1
                found.problems.append(f"stale commit {scope} seq={seq} fence={fence}")


def _check_effects(
    redis: Redis,
    keys: BucketKeys,
    accepted: dict[str, Accepted],
    states: dict[str, str | None],
    receipts: Receipts,
    found: History,
    dump_dir: Path | None = None,
) -> None:
    """Invariant 8: one effect per event at the deduping receiver, however often it was delivered. The
    event's outbox records are read as its run detail reads them (``records_of_event``), not by layout."""
    store = cast(Any, SimpleNamespace(client=redis, keys=keys))
    effects: Counter[str] = Counter()
    for key, n in receipts.effects.items():
        effects[receipts.sid_of.get(key, "")] += n
        if n > 1:
            found.effects_twice += 1
            found.problems.append(f"effect applied {n} times under key {key}")
    found.deliveries = sum(receipts.deliveries.values())
    if dump_dir is not None:  # diagnostics: every request whose sid is no accepted event's, or that failed
        sids = {sid for sid, _, _ in accepted.values()}
        odd = [e for e in receipts.log if e.get("error") or e.get("sid") not in sids]
        (dump_dir / "receiver-anomalies.json").write_text(json.dumps(odd, indent=1))
    for event_id, (sid, scope, _) in accepted.items():
        if states[sid] == "done":
            records = [str(r.get("state")) for r in records_of_event(keys, store, scope, event_id)]
            if effects[sid] < 1 or not records or any(r != "delivered" for r in records):
                found.effects_lost += 1
                found.problems.append(
                    f"effect lost {sid}: records {records or 'none'}, effects {effects[sid]}"
                )
                if dump_dir is not None:
                    _dump_lost(redis, keys, event_id, sid, scope, receipts, dump_dir)
        if effects[sid] > 1:
            found.effects_twice += 1
            found.problems.append(f"effect applied {effects[sid]} times for {sid}")


def _event_hash(redis: Redis, keys: BucketKeys, event_id: str) -> Any:
    try:
        return redis.hgetall(keys.event(event_id))
    except Exception as exc:  # a binary field (decode_responses)
        return f"unreadable: {exc!r}"


def _dump_lost(
    redis: Redis,
    keys: BucketKeys,
    event_id: str,
    sid: str,
    scope: str,
    receipts: Receipts,
    dump_dir: Path,
) -> None:
    """Diagnostics for an event whose effect the checker found lost: its outbox records as stored, every
    receiver request whose key is one of them or whose body names its sid, the event hash, and the worker log
    lines that mention the event or its records."""
    scoped = keys.for_scope(scope) if hasattr(keys, "for_scope") else keys
    index = scoped.outbox_of_event(scope, event_id)
    ids = sorted(str(i) for i in redis.smembers(index))
    raw = {i: redis.get(scoped.outbox_record(scope, i)) for i in ids}
    record_keys = set()
    for value in raw.values():
        if value is not None:
            record_keys.add(json.loads(value).get("key"))
    members = [f"{scoped.scope_ref(scope)}\x1f{i}" for i in ids]
    due = {m: redis.zscore(scoped.outbox_due, m) for m in members}
    dead = {m: redis.zscore(scoped.outbox_dead, m) for m in members}
    related = [e for e in receipts.log if e.get("key") in record_keys or e.get("sid") == sid]
    same_keys = {
        k: (receipts.deliveries.get(k), receipts.effects.get(k), receipts.sid_of.get(k)) for k in record_keys
    }
    needles = [event_id, sid, *ids, *record_keys]
    lines: dict[str, list[str]] = {}
    for log in sorted(dump_dir.glob("worker-*.log")):
        hits = [
            line for line in log.read_text(errors="replace").splitlines() if any(n in line for n in needles)
        ]
        lines[log.name] = hits[-200:]
    dump = {
        "eventId": event_id,
        "sid": sid,
        "scope": scope,
        "event": _event_hash(redis, keys, event_id),
        "index": index,
        "records": raw,
        "due": due,
        "dead": dead,
        "receiver": {"byKey": same_keys, "related": related},
        "workerLogLines": lines,
    }
    (dump_dir / f"effect-lost-{sid}.json").write_text(json.dumps(dump, indent=1, default=str))


@dataclass
class Row:
    """One line of the battery's table."""

    scenario: str
    history: History
    seconds: float
    expectations: list[str] = field(default_factory=list)  # scenario-specific failures

    @property
    def ok(self) -> bool:
        return self.history.ok and not self.expectations


COLUMNS = (
    "scenario",
    "events",
    "dead/poisoned",
    "lost",
    "applied twice",
    "order violations",
    "fence rejections",
    "batched",
    "stale commits",
    "effects lost",
    "effects twice",
    "deliveries",
    "seconds",
)


def format_table(rows: Sequence[Row]) -> str:
    """The table: one row per scenario, then the problems of the rows that failed."""
    cells = [list(COLUMNS)] + [
        [
            r.scenario,
            str(r.history.events),
            f"{r.history.dead}/{r.history.expected_dead}",
            str(r.history.lost),
            str(r.history.applied_twice),
            str(r.history.order_violations),
            str(r.history.fence_rejections),
            str(r.history.batched),
            str(r.history.stale_commits),
            str(r.history.effects_lost),
            str(r.history.effects_twice),
            str(r.history.deliveries),
            f"{r.seconds:.1f}",
        ]
        for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    for r in rows:
        for problem in [*r.expectations, *r.history.problems][:10]:
            lines.append(f"  {r.scenario}: {problem}")
    return "\n".join(lines)
