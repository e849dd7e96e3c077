"""The journal: what a commit writes outside its scope's slot, when a tenant is spread over scope buckets.

With ``AGENT_SIGNAL_SCOPE_BUCKETS`` above 1 (worker/keys/buckets.py) a commit's script runs in its scope's
bucket slot, and may not touch a key of another slot. Two things of a commit can: a handler's staged write to
the tenant's user data (a receipt, a memory, a skill, a conversation line: ``{<tenant>}``) or to another
scope's keys, and a follow-up event of a scope in another bucket. Both are journaled: the commit (or the
action's lane) writes, in its own slot and atomically with itself, an outbox record per other slot, applied
there by the outbox relay (worker/outbox/relay.py):

* ``engine.apply``: the staged writes of one slot, applied by JOURNAL_APPLY, which first sets a once-marker
  (``applied:<recordId>``) in that slot: a record delivered twice (a relay whose claim ran out) applies once.
* ``engine.enqueue``: a follow-up event, admitted in its own bucket like any event (its id is its dedupe
  identity, so a second delivery is a duplicate) and made ready to drain.

The records wait on the bucket's journal (``Keys.journal_due``), scored by when the commit staged them, and
the relay applies them one at a time in that order (the ordered mode of worker/outbox/relay.py, with the deliverers of
worker/outbox/journal_delivery.py), so a scope's writes to the
home slot land in commit order. Nothing a commit decided is lost or applied twice; what changes is when the
other slot sees it: after the relay's next pass (``AGENT_SIGNAL_OUTBOX_POLL_INTERVAL_S``), not in the
commit's own instant. With one bucket every key of a tenant is in one slot and nothing is journaled.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from worker.chain.outbox_records import OutboxRecord, outbox_commands
from worker.core.clock import now_ms, now_us
from worker.keys.buckets import slot_tag
from worker.keys.layout import BucketKeys, Keys
from worker.store.records import PreparedEvent

__all__ = [
    "JOURNAL_APPLY",
    "JOURNAL_ENQUEUE",
    "journal_followups",
    "journal_score_us",
    "journaled",
]

JOURNAL_APPLY = "engine.apply"
JOURNAL_ENQUEUE = "engine.enqueue"

Command = list[str]


def journal_score_us() -> int:
    """The journal's order: when the commit staged the record (µs; a scope's commits are serialized by its
    lease, so its records are in commit order, by the service's clock: Redis's, worker/core/clock.py)."""
    return now_us()


def _split(bucket: BucketKeys, commands: Sequence[Command]) -> tuple[list[Command], dict[str, list[Command]]]:
    """The commands of ``bucket``'s slot, and the others by slot tag (a multi-key DEL is split)."""
    here = slot_tag(bucket.bucket_prefix)
    local: list[Command] = []
    other: dict[str, list[Command]] = {}
    last = local
    then: Command = ["THEN", "0"]
    guarded = 0  # commands left that a THEN guards: they stay beside it, counted again once split
    for cmd in commands:
        if cmd[0].upper() == "THEN":  # EffectBuffer.call_once: its commands are in its SET NX's slot
            then = ["THEN", "0"]
            last.append(then)
            guarded = int(cmd[1])
            continue
        parts = [["DEL", k] for k in cmd[1:]] if cmd[0].upper() == "DEL" and len(cmd) > 2 else [cmd]
        for part in parts:
            tag = slot_tag(part[1])
            last = local if tag == here else other.setdefault(tag, [])
            last.append(part)
        if guarded:
            guarded -= 1
            then[1] = str(int(then[1]) + len(parts))
    return local, other


def journaled(
    keys: Keys, scope_key: str, event_id: str, label: str, commands: list[Command], retention_s: int
) -> list[Command]:
    """``commands`` as a script in the scope's slot may run them: its own slot's, then one ``engine.apply``
    record per other slot. ``label`` names the commit or the lane and its fence (an event id or an
    idempotency key comes back after the dedupe window; a fencing number never does), so each record id is
    written once."""
    if keys.buckets <= 1 or not commands:
        return commands
    bucket = keys.for_scope(scope_key)
    local, other = _split(bucket, commands)
    if not other:
        return commands
    for tag, group in sorted(other.items()):
        record_id = f"journal:{label}:{tag}"
        payload: dict[str, Any] = {"commands": group}
        local += _staged(
            bucket, JOURNAL_APPLY, record_id, record_id, payload, scope_key, event_id, retention_s
        )
    return local


def _staged(
    bucket: BucketKeys,
    kind: str,
    record_id: str,
    key: str,
    payload: dict[str, Any],
    scope_key: str,
    event_id: str,
    retention_s: int,
) -> list[Command]:
    """The staged writes of one journal record on the bucket's journal (now, in µs, is its place)."""
    record = OutboxRecord(
        id=record_id,
        kind=kind,
        key=key,
        payload=payload,
        scope_key=scope_key,
        event_id=event_id,
        created_at=now_ms(),
        tenant=bucket.tenant,
    )
    return [
        [str(a) for a in c]
        for c in outbox_commands(bucket, record, retention_s, journal_score_us=journal_score_us())
    ]


def journal_followups(
    keys: Keys,
    scope_key: str,
    event_id: str,
    label: str,
    followups: Sequence[PreparedEvent],
    retention_s: int,
) -> tuple[list[PreparedEvent], list[Command]]:
    """The follow-ups the commit admits itself (its own bucket's), and the outbox commands that journal the
    others (one ``engine.enqueue`` record each; ``label`` names the commit, as in :func:`journaled`)."""
    if keys.buckets <= 1 or not followups:
        return list(followups), []
    bucket = keys.for_scope(scope_key)
    here = bucket.bucket
    own: list[PreparedEvent] = []
    commands: list[Command] = []
    for ev in followups:
        if keys.for_scope(ev.scope_key).bucket == here:
            own.append(ev)
            continue
        record_id = f"follow-up:{label}:{ev.event_id}"
        payload = {
            "eventId": ev.event_id,
            "scopeKey": ev.scope_key,
            "sourceId": ev.source_id,
            "body": ev.body,
            "sourceType": ev.source_type,
            "userId": ev.user_id,
        }
        commands += _staged(
            bucket, JOURNAL_ENQUEUE, record_id, ev.event_id, payload, scope_key, event_id, retention_s
        )
    return own, commands
