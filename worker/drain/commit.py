"""The one commit path: a run of one or more head events of a scope (an event alone is a run of one) committed
by one COMMIT script (worker/store/lua/commit.lua), its reply read in one place.

What each reply code means here (worker/store/replies.py ``CommitCode``):

* ``COMMITTED``: each event's :data:`~worker.drain.event.AFTER_COMMIT` steps and metrics follow; the reply
  names the next head and the fresh events behind it (the next run), and, when the commit was asked to pop the
  next scope (``then_pop``) and released this one, what it popped (``ChainedPop.reply``).
* ``ENDED``: the run ended early (the next event is no longer the head): nothing wrong, the drain goes on.
* ``LANE_TAKEN``: the next event was not committed (a lane already marked, or staged writes that would be
  refused): it runs again alone, and finds the stored results (or is refused there).
* ``REFUSED`` / ``PARTIAL``: a staged write was refused or failed midway: that event is committed ``dead`` on its
  own, without what its chain staged (:func:`commit_dead`, the one place that does so).
* ``STALE_FENCE`` / ``NOT_HEAD``: the scope is not ours any more (a stale fence marks the lease lost).

A store error leaves the run uncommitted at its inbox head (the next drain after the lease runs out takes it,
counting an attempt); a full store is waited out first (the same commit again, worker/store/server/full.py). A
commit the replicas did not confirm (``AGENT_SIGNAL_WAIT_REPLICAS``) was applied on the primary: the drain stops
and gives its grant back (``LeaseGrant.unconfirmed_commit``; the next head it began uncounted).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from redis.exceptions import RedisError

from worker.chain.context import EffectBuffer
from worker.core.replication import NotReplicated
from worker.documents.chain_codec import StoredForm
from worker.drain.context import DrainContext
from worker.drain.event import EventWork, after_commit, record
from worker.drain.lease import ChainedPop
from worker.store.calls import Commit
from worker.store.records import Begun, EventCommit, Head, RunReply
from worker.store.replies import CommitCode, HeadCode
from worker.store.scripts import SentCall
from worker.telemetry.log_privacy import describe_error, refusal_kind

__all__ = ["RunCommitted", "commit_dead", "commit_run", "event_commit"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RunCommitted:
    """What a run's commit left: how many events committed, the scope's head now, the fresh events behind it,
    and whether the head must run on its own (``slow``) or the scope is no longer ours (``lost``)."""

    committed: int = 0
    head: Head | None = None
    followers: list[Begun] = field(default_factory=list)
    slow: bool = False
    lost: bool = False
    # ``followers`` come after the first ``peek_skip`` fresh events behind the new head (the caller's own list)
    peek_skip: int = 0
    # every event of the run was committed by the run's own COMMIT (none refused, none left out)
    whole: bool = False


def event_commit(work: EventWork, form: StoredForm) -> EventCommit:
    """What the commit of ``work`` stores: its outcome and chain; if done, its staged writes and follow-ups; its
    actions' lanes when its run applies them (in the stored ``form``: the setting AGENT_SIGNAL_STORED_FORM)."""
    done = work.outcome == "done"
    source = work.source
    return EventCommit(
        event_id=work.begun.event_id,
        outcome=work.outcome or "dead",
        error=work.error,
        not_before_ms=work.not_before_ms,
        chain_id=source.chain.chain_id if source is not None else "",
        chain_json=b"" if work.chain is None else work.chain.stored_json(),
        source_id=source.source_id if source is not None else "",
        effects=work.scope.effects if done else EffectBuffer(),
        followups=work.followups.events if done else (),
        lanes=[lane.layout(form) for lane in work.lanes or ()],
        # a run that did not end it: its lanes kept until it does (a later run, however late, replays them)
        kept_lanes=[] if done else [*work.marked_lanes, *(lane.key for lane in work.lanes or ())],
    )


def commit_run(
    ctx: DrainContext,
    works: Sequence[EventWork],
    *,
    go_on: bool,
    peek: int,
    peek_skip: int = 0,
    then_pop: ChainedPop | None = None,
    meanwhile: Callable[[], None] | None = None,
) -> RunCommitted:
    """COMMIT ``works`` (the head and the events right behind it, in order), each going on to the next head;
    the last goes on only with ``go_on``. ``peek``: fresh events to list behind the new head, after the first
    ``peek_skip`` (known to the caller). ``then_pop``: once the scope is released, pop the next ready scope and
    take its lease in the same round trip (what it popped is in ``then_pop.reply`` as soon as the reply is
    read, before anything else can raise). ``meanwhile``: run while the COMMIT is in flight, where the store
    sends ahead (:attr:`EventStore.sends_ahead`); the reply is read and settled after it, even when it
    raises (its exception then goes on)."""
    grant = works[0].grant
    form = ctx.settings.stored_form
    events = [event_commit(work, form) for work in works]
    flags = [go_on or i < len(works) - 1 for i in range(len(works))]
    store = ctx.store

    def call() -> Commit:
        return store.commit_call(
            grant.keys,
            grant.scope_key,
            fence=grant.fence,
            token=grant.token,
            events=events,
            go_on=flags,
            peek=peek,
            peek_skip=peek_skip,
            then_pop=None if then_pop is None else then_pop.call,
        )

    settled = partial(
        _reply_settled, ctx, works, go_on=flags[-1], peek=peek, peek_skip=peek_skip, then_pop=then_pop
    )
    if meanwhile is None or not store.sends_ahead:  # the common path: send, wait, read
        return settled(lambda: store.commit_run(call()))
    sent: SentCall | None = None
    failed: BaseException | None = None
    try:
        sent = store.send_commit(call())
    except RedisError:
        pass  # not sent (a broken connection, most likely): the commit below sends it, nothing runs ahead
    if sent is not None:
        try:
            meanwhile()
        except BaseException as exc:  # the commit was sent: its reply is read and settled first
            failed = exc

    def attempt() -> RunReply:  # the reply of the one in flight first; after a full store's pause, a new one
        nonlocal sent
        if sent is None:
            return store.commit_run(call())
        reading, sent = sent, None  # read (or its reading failed): nothing left to abandon
        return RunReply.parse(reading.reply())

    try:
        done = settled(attempt)
    except BaseException as exc:
        if failed is None:
            raise
        raise with_earlier(exc, failed)  # noqa: B904 (its cause is set there)
    finally:
        if sent is not None:  # never read (whatever raised before the read): its connection goes back
            sent.abandon()
    if failed is not None:
        raise failed
    return done


def with_earlier(later: BaseException, earlier: BaseException) -> BaseException:
    """What to raise when settling a commit raised ``later`` after its look-ahead raised ``earlier``: an
    interrupt (KeyboardInterrupt, a worker's shutdown) wins; else ``later``, with ``earlier`` as its cause when
    it has none of its own, or named in a note."""
    if not isinstance(earlier, Exception):
        earlier.__context__ = later
        return earlier
    if later.__cause__ is None and not later.__suppress_context__:
        later.__cause__ = earlier
    else:
        later.add_note(f"the look-ahead had raised {earlier!r}")
    return later


def _reply_settled(
    ctx: DrainContext,
    works: Sequence[EventWork],
    attempt: Callable[[], RunReply],
    *,
    go_on: bool,
    peek: int,
    peek_skip: int,
    then_pop: ChainedPop | None,
) -> RunCommitted:
    """The commit's reply (``attempt``, again after a full store's pause), read and settled."""
    try:
        reply = ctx.full_wait("commit", works[0].grant.lost).call(attempt)
    except NotReplicated as exc:  # applied on the primary; a failover now would undo it: do not go on
        log.warning("commit not confirmed by replicas (%s)", describe_error(exc))
        works[0].grant.unconfirmed_commit = _parsed(exc.reply)  # the drain gives its grant back
        return _lost(works)
    except RedisError as exc:
        log.warning(
            "commit not acknowledged (%s): the next drain finds out what it applied", describe_error(exc)
        )
        return _lost(works)
    if then_pop is not None and reply.popped is not None:
        then_pop.reply = reply.popped
    return _settle(ctx, works, reply, go_on=go_on, peek=peek, peek_skip=peek_skip, then_pop=then_pop)


def _parsed(reply: Any) -> RunReply | None:
    """A COMMIT reply the replicas did not confirm, read (None: not a reply of COMMIT's shape)."""
    try:
        return RunReply.parse(reply)
    except (TypeError, ValueError, IndexError):
        return None


def _lost(works: Sequence[EventWork]) -> RunCommitted:
    for work in works:
        work.lost = True
    return RunCommitted(lost=True)


def _settle(
    ctx: DrainContext,
    works: Sequence[EventWork],
    reply: RunReply,
    *,
    go_on: bool,
    peek: int,
    peek_skip: int,
    then_pop: ChainedPop | None,
) -> RunCommitted:
    """Read COMMIT's reply: finish each committed event, then act on why the run stopped (module docstring)."""
    out = RunCommitted()
    for work, event_reply in zip(works, reply.replies, strict=False):
        for lane in work.lanes or ():  # marked by this commit: kept if it is committed dead on its own next
            work.marked_lanes[lane.key] = None
        work.lanes, work.reply = None, event_reply
        if event_reply.code is not CommitCode.COMMITTED:
            break
        if event_reply.outcome == "cancelled":  # cancelled while it ran
            work.outcome = "cancelled"
        out.committed += 1
        out.head = event_reply.head
        after_commit(ctx, work)
    code = reply.code
    if code is CommitCode.COMMITTED:
        out.followers, out.peek_skip = reply.followers, peek_skip
        out.whole = out.committed == len(works)
    elif code is CommitCode.LANE_TAKEN:
        out.slow = True
    elif code in (CommitCode.REFUSED, CommitCode.PARTIAL):
        failing = works[out.committed]
        refused = failing.reply is not None and failing.reply.code is CommitCode.REFUSED
        error = (
            failing.reply.error if refused and failing.reply is not None else f"INVALID_EFFECT: {reply.error}"
        )
        dead = commit_dead(  # its own commit lists from the new head: the caller's known ones too
            ctx,
            failing,
            error,
            go_on=go_on or out.committed < len(works) - 1,
            peek=peek + peek_skip,
            then_pop=then_pop,
        )
        if dead.lost:
            out.lost = True
            return out
        out.committed += 1
        out.head, out.followers = dead.head, dead.followers
    elif code in (CommitCode.STALE_FENCE, CommitCode.NOT_HEAD):
        failing = works[len(reply.replies) - 1]
        if code is CommitCode.STALE_FENCE:
            log.warning("fenced commit rejected (stale lease)", extra={"eventId": failing.begun.event_id})
            failing.grant.lost.set()
        else:
            log.error(
                "commit found another event at the inbox head", extra={"eventId": failing.begun.event_id}
            )
        failing.lost = True
        record(ctx, failing)
        out.lost = True
    if out.head is None and out.committed == 0 and not out.lost:
        out.head = Head(
            HeadCode.TAKEN, works[0].begun
        )  # nothing committed: the first event is still our head
    return out


def commit_dead(
    ctx: DrainContext,
    work: EventWork,
    error: str,
    *,
    go_on: bool,
    peek: int,
    then_pop: ChainedPop | None = None,
) -> RunCommitted:
    """Commit ``work`` dead on its own, without what its chain staged (its staged writes were refused)."""
    log.error("staged write refused (%s)", refusal_kind(error), extra={"eventId": work.begun.event_id})
    for lane in work.lanes or ():  # a PARTIAL run marked some of them before it stopped: kept with it, dead
        work.marked_lanes[lane.key] = None
    work.lanes, work.reply, work.status = None, None, "error"
    work.decide("dead", error)
    return commit_run(ctx, [work], go_on=go_on, peek=peek, then_pop=then_pop)
