"""Bursts by the batch: several head events of a scope run back to back and commit in one script.

A scope's drain normally pays three round trips per event: each action's idempotency lookup, its APPLY, and
the event's COMMIT (which also takes the next head). When the head has never been delivered before (its
first attempt), the events queued right behind it are fresh too (PEEK_FRESH lists them), and every handler
their chains meet is batch-safe (``batch_safe=True``: it reads nothing an earlier event of the scope writes,
and its effects are staged), up to ``commit_batch_max`` of them run one after another with no round trip
(:class:`~worker.drain.batch_port.BatchPort` collects their actions' lanes), and COMMIT_BATCH commits them in inbox
order, each exactly as a lone COMMIT would, with its lanes applied right before it.

What keeps every guarantee:

* **Order and fencing.** The events are the inbox's head and the ones right behind it, committed in that
  order by COMMIT's own code under our fence; the batch ends at the first event that is not done (a retry
  stays the head) or that a commit did not take as the next head.
* **Nothing done twice.** A batched event is begun (its attempt counted) by the commit of the event before
  it, inside the same script that commits it, so a worker killed mid-batch leaves committed events
  committed and the rest queued or at the head, where the next drain takes them. Nothing of a chain is
  written before its commit, so running a chain again is harmless. A lane another event marked meanwhile,
  or an action's staged write that would be refused, stops the batch before that event, which then runs on
  its own on the slow path (and finds the stored result, or is dead-lettered as it would have been).
* **A poison event.** Only the head counts an attempt when a worker dies; the events peeked behind it do
  not. The drain after a lost delivery (its head was still ``processing``) runs one event at a time, so a
  crash-looping event reaches the head in that drain and is dead-lettered after ``max_attempts`` of its own
  deliveries; the head pays one attempt. With ``max_attempts`` 1 there are no batches.
* **Handlers that are not batch-safe.** A chain that reaches one stops (NotBatchable) before that handler
  runs; what ran before is pure, so the event runs again on the slow path after the batch before it
  commits, and its source type is not batched again in this process.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError

from worker.chain.chain_document import event_head
from worker.core.clock import now_ms
from worker.core.errors import NotReplicated
from worker.documents.lane_codec import encode_lane
from worker.drain.lease import LeaseGrant
from worker.drain.steps import CommitStep, EventWork
from worker.store.events import Begun, Head, staged_error
from worker.store.records import to_str
from worker.store.scripts_batch import COMMIT_ARGS, COMMIT_KEYS
from worker.telemetry.log_privacy import describe_error, refusal_kind

if TYPE_CHECKING:
    from worker.drain.pipeline import DrainOutcome, Pipeline

__all__ = ["drain_in_batches"]

log = logging.getLogger("worker.drain.pipeline")


@dataclass(slots=True)
class Batched:
    """What one batch commit left: how many events committed, the scope's head now, the fresh events behind
    it, and whether the head must run on its own (``slow``) or the lease was lost."""

    committed: int = 0
    head: Head | None = None
    followers: list[Begun] = field(default_factory=list)
    slow: bool = False
    lost: bool = False


def drain_in_batches(pipeline: Pipeline, grant: LeaseGrant, head: Head) -> DrainOutcome:
    """The scope drain of :meth:`Pipeline._drain_heads`, in batches where the events allow."""
    from worker.drain.pipeline import DrainOutcome

    limit, batch_max = pipeline.settings.max_events_per_drain, pipeline.settings.commit_batch_max
    # After a lost delivery (the head was processing when its worker died) the whole drain runs one by one,
    # so whichever event killed the worker reaches the head and counts its own attempts; with one attempt
    # allowed, a batch's crash would dead-letter its head for another event's fault: no batches at all.
    lost_delivery = head.begun is not None and head.begun.previous_state == "processing"
    unbatched = lost_delivery or pipeline.settings.max_attempts <= 1
    processed, slow = 0, False
    followers = [] if unbatched else _peek(pipeline, grant, head, min(limit, batch_max) - 1)
    while head.code == 1 and head.begun is not None:
        room = min(batch_max, limit - processed)
        if room <= 0:  # max_events_per_drain: let other scopes have a turn
            return pipeline.hand_off(grant, processed, 0)
        run_alone = slow or unbatched
        works = [] if run_alone else _speculate(pipeline, grant, [head.begun, *followers[: room - 1]])
        if works is None:
            return DrainOutcome(processed, "lost")
        if works:
            done = _commit(pipeline, works, go_on=processed + len(works) < limit)
            processed += done.committed
            if done.lost:
                return DrainOutcome(processed, "lost")
            next_head, followers, slow = done.head, done.followers, done.slow
        else:
            work = pipeline.process_event(grant, head.begun, go_on=processed + 1 < limit)
            if work.reply is None or work.reply.code != 1:
                return DrainOutcome(processed, "lost")
            processed += 1
            next_head, slow = work.reply.head, False
            count = min(limit - processed, batch_max) - 1
            followers = [] if unbatched else _peek(pipeline, grant, next_head, count)
        if next_head is None:  # max_events_per_drain: let other scopes have a turn
            return pipeline.hand_off(grant, processed, 0)
        head = next_head
    if head.code == 0:
        return DrainOutcome(processed, "idle")  # the script released the scope
    return pipeline.hand_off(grant, processed, max(head.not_before_ms - now_ms(), 0))


def _batchable(pipeline: Pipeline, begun: Begun) -> bool:
    """A first delivery, of a source type whose chains have met only batch-safe handlers so far."""
    if begun.attempts != 1:
        return False
    return (
        not pipeline.unbatchable or event_head(begun.body, begun.source_type)[0] not in pipeline.unbatchable
    )


def _peek(pipeline: Pipeline, grant: LeaseGrant, head: Head | None, count: int) -> list[Begun]:
    """The fresh events right behind the head we hold (none when the head itself is not batchable, or
    ACQUIRE saw nothing behind it)."""
    if head is None or head.begun is None or count <= 0 or head.behind == 0:
        return []
    if not _batchable(pipeline, head.begun):
        return []
    k = pipeline.keys.for_scope(grant.scope_key)
    reply = pipeline.store.scripts.peek_fresh(
        keys=[k.inbox(grant.scope_key), k.fence(grant.scope_key)],
        args=[grant.fence, k.event_prefix, now_ms(), head.begun.event_id, count],
    )
    return _begun_list(reply)


def _begun_list(flat: Any) -> list[Begun]:
    items = [to_str(x) for x in flat] if isinstance(flat, list) else []
    return [
        Begun(items[i], items[i + 1], 1, "queued", "", items[i + 2], items[i + 3])
        for i in range(0, len(items) - 3, 4)
    ]


def _speculate(pipeline: Pipeline, grant: LeaseGrant, events: list[Begun]) -> list[EventWork] | None:
    """Run the chains of ``events`` for a batch, in order, until one is not batchable or not done; None when
    the lease was lost meanwhile (nothing is committed then)."""
    works: list[EventWork] = []
    for begun in events:
        if not _batchable(pipeline, begun):
            break
        work = pipeline.process_event(grant, begun, go_on=True, batch=True)
        if work.lost:
            return None
        if work.unbatchable:
            pipeline.unbatchable.add(work.source_type)
            log.info(
                "source type %s is not batched here: its chain met a handler that is not batch-safe",
                work.source_type,
            )
            break
        works.append(work)
        if work.outcome != "done":
            break
    return works


def _commit(pipeline: Pipeline, works: list[EventWork], *, go_on: bool) -> Batched:
    """COMMIT_BATCH for ``works``; then what follows each committed event's commit."""
    store = pipeline.store
    commits = [CommitStep.commit_of(work) for work in works]
    keys, shared_args = store.commit_shared(commits[0], now_ms())
    args: list[Any] = [
        len(works),
        pipeline.settings.idempotency_ttl_s,
        pipeline.settings.commit_batch_max - 1,
    ]
    args += shared_args
    if len(keys) != COMMIT_KEYS or len(shared_args) != COMMIT_ARGS:  # COMMIT_BATCH's fixed layout
        raise RuntimeError("COMMIT's keys or arguments changed: update worker/store/scripts_batch.py")
    for i, (work, commit) in enumerate(zip(works, commits, strict=True)):
        work.go_on = go_on or i < len(works) - 1
        own_keys, own_args = store.commit_own(commit, go_on=work.go_on)
        lanes = work.lanes or []
        keys += own_keys
        keys += [lane.key for lane in lanes]
        args.append(len(lanes))
        args += own_args
        for lane in lanes:
            args += [encode_lane(lane.result_json), lane.effects_json]
    full = pipeline.full_wait("commit", works[0].grant.lost)
    try:
        reply = full.call(lambda: store.durable(store.scripts.commit_batch, keys, args))
    except (NotReplicated, RedisError) as exc:  # as CommitStep: not acknowledged; the next drain finds out
        log.warning(
            "batch commit not acknowledged (%s): the scope's next drain takes what it did not commit",
            describe_error(exc),
        )
        return Batched(lost=True)
    return _settle(pipeline, works, reply)


def _settle(pipeline: Pipeline, works: list[EventWork], reply: Any) -> Batched:
    """Read COMMIT_BATCH's reply: finish each committed event, then act on why the batch stopped."""
    code, replies = int(reply[0]), list(reply[1])
    out = Batched()
    for work, raw in zip(works, replies, strict=False):
        work.lanes = None
        work.reply = pipeline.store.commit_reply(raw)
        if work.reply.code != 1:
            break
        if work.reply.outcome == "cancelled":
            work.outcome = "cancelled"
        out.committed += 1
        out.head = work.reply.head
        pipeline.after_commit(work)
    if code == 1:
        out.followers = _begun_list(reply[2])
    elif code == -4:  # the next event runs on its own (a lane already marked, a staged write refused)
        out.slow = True
    elif code in (-3, -5):  # a staged write refused, or one that failed midway: that event is dead
        failing = works[out.committed]
        if code == -3 and failing.reply is not None:
            error = failing.reply.error
        else:
            error = f"INVALID_EFFECT: {staged_error([-3, *list(reply)[3:5]])}"
        _commit_dead(pipeline, failing, error)
        if failing.reply is None or failing.reply.code != 1:
            out.lost = True
            return out
        out.committed += 1
        out.head = failing.reply.head
    elif code in (-1, -2):  # a stale fence (the lease is someone else's now), or another event at the head
        failing = works[out.committed]
        if code == -1:
            failing.grant.lost.set()
        pipeline.record(failing)
        out.lost = True
    if out.head is None and out.committed == 0 and not out.lost:
        out.head = Head(1, works[0].begun)  # nothing committed: the first event is still our head
    return out


def _commit_dead(pipeline: Pipeline, work: EventWork, error: str) -> None:
    """Commit ``work`` dead on its own, without what its chain staged (CommitStep's rule for a refused write)."""
    log.error("staged write refused (%s)", refusal_kind(error), extra={"eventId": work.begun.event_id})
    work.lanes, work.reply, work.status = None, None, "error"
    work.decide("dead", error)
    CommitStep()(work, pipeline)
    pipeline.after_commit(work)
