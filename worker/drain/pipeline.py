"""Draining a scope, top to bottom: take the lease, run the head events in runs, commit each run, release.

``Pipeline.drain(ref)`` takes the scope ref ``<tenant>/<scopeKey>`` a drain task carries: the tenant travels with
it into the lease grant's keys, so one pipeline, store, emitter and lease serve every tenant of a process.

1. **Lease.** ACQUIRE grants the lease, issues the fencing number and takes the inbox's head in one round trip
   (worker/drain/lease.py); one renewer thread per process keeps it.
2. **A run.** The head, and the fresh events right behind it (never delivered: PEEK_FRESH, or the previous
   commit's reply) whose chains meet only batch-safe handlers, run one after another with no round trip per
   action (worker/drain/event.py: their lanes wait for the commit), up to ``commit_batch_max``; a run ends at the
   first event that is not done. An event that cannot go with others runs alone: its actions apply one by one
   (APPLY), and it commits as a run of one.
3. **Commit.** One COMMIT for the run (worker/drain/commit.py), each event exactly as alone: fenced, at the head,
   with its outcome, chain, staged writes and follow-ups, its lanes applied right before it; the same round trip
   takes the next head, or releases the scope when the inbox is empty. With ``drain_ahead``, where the store
   sends ahead and runs are taken at all, the next run's chains run while this COMMIT is in flight
   (worker/drain/ahead.py).
4. **Next.** Until the inbox is empty (the script released the scope), its head waits for a retry time, or the
   drain reached ``max_events_per_drain`` or ran for ``drain_message_budget_s``: then the scope is handed off (token-checked release that keeps it
   scheduled) and the caller publishes its next drain. A drain_next message that goes on to another scope
   (``then_pop``, one Redis with one scope bucket) has the commit that releases the scope pop the next ready
   one and take its lease in the same round trip (:attr:`DrainOutcome.popped`).

What keeps every guarantee in a run: the events are the inbox's head and the ones right behind it, committed in
that order under our fence; a run's event is begun (its attempt counted) by the commit of the event before it,
inside the same script, so a worker killed mid-run leaves committed events committed and the rest queued or at
the head; nothing of a chain is written before its commit, so running a chain again is harmless. Only the head
counts an attempt when a worker dies: after a lost delivery (the head was still ``processing``) the whole drain
runs event by event, so a crash-looping event reaches the head and is dead-lettered after ``max_attempts`` of its
own deliveries (with ``max_attempts`` 1 there are no runs of several). A chain that reaches a handler that is not
batch-safe stops before it runs (NotBatchable); the event runs again alone, and its source type is not run for a
batch again in this process.

A scope is released only inside ACQUIRE or COMMIT, atomically with the empty-inbox check, so an event appended
meanwhile is drained by us or schedules a new drain: never stranded.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Literal

from worker.chain.chain_document import event_head
from worker.chain.context import Deps
from worker.chain.registry import Registry
from worker.core.clock import now_ms
from worker.core.tenancy import DEFAULT_TENANT, scope_ref, split_scope_ref
from worker.drain.ahead import Lookahead
from worker.drain.commit import RunCommitted, commit_run
from worker.drain.context import DrainContext
from worker.drain.event import EventWork, count_runs, run_event
from worker.drain.lease import Acquired, ChainedPop, LeaseGrant, Popped, ScopeLease
from worker.intake.emitter import Emitter
from worker.keys.layout import EngineKeys
from worker.settings import Settings
from worker.store.calls import PeekFresh
from worker.store.events import EventStore
from worker.store.records import Begun, Head, begun_list
from worker.store.replies import HeadCode
from worker.telemetry.log_privacy import describe_error
from worker.telemetry.recorder import DISABLED, Telemetry

__all__ = ["DrainOutcome", "Pipeline"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DrainOutcome:
    """What the caller (the Celery task) should do next for this scope; when the drain was given ``then_pop``
    and its last commit released the scope: the next scope it popped and took (``popped``, the caller drains it
    next), or ``retired`` (nothing was ready: the drain_next message's ticket is retired)."""

    processed: int
    next: Literal["idle", "again", "busy", "lost"]
    delay_s: float = 0.0
    popped: Popped | None = None
    retired: bool = False


class Pipeline:
    """Drains scopes of every tenant. One instance per worker process; holds no per-scope state between drains."""

    def __init__(
        self,
        store: EventStore,
        registry: Registry,
        settings: Settings,
        *,
        deps: Deps | None = None,
        emitter: Emitter | None = None,
        publish_drain: Callable[[str], None] | None = None,
        telemetry: Telemetry = DISABLED,
    ) -> None:
        self.ctx = DrainContext(
            store=store,
            registry=registry,
            settings=settings,
            telemetry=telemetry,
            deps=deps or Deps(),
            emitter=emitter,
            publish=publish_drain or (lambda ref: None),
        )
        self.lease = ScopeLease(
            store.scripts,
            ttl_s=settings.lease_ttl_s,
            renew_interval_s=settings.lease_renew_interval_s,
            run=store.durable,
            window_s=settings.dedupe_window_s,
        )

    @property
    def store(self) -> EventStore:
        return self.ctx.store

    @property
    def settings(self) -> Settings:
        return self.ctx.settings

    @property
    def telemetry(self) -> Telemetry:
        return self.ctx.telemetry

    @property
    def deps(self) -> Deps:
        return self.ctx.deps

    @property
    def registry(self) -> Registry:
        return self.ctx.registry

    @property
    def emitter(self) -> Emitter | None:
        return self.ctx.emitter

    @property
    def keys(self) -> EngineKeys:
        """The layout (each drain uses its scope ref's tenant's keys)."""
        return self.ctx.store.keys

    def drain_scope(self, scope_key: str, *, holder: str = "", tenant: str = DEFAULT_TENANT) -> DrainOutcome:
        """Drain ``tenant``'s scope (tests and tools; tasks carry scope refs: :meth:`drain`)."""
        return self.drain(scope_ref(tenant, scope_key), holder=holder)

    def drain(
        self,
        ref: str,
        *,
        holder: str = "",
        acquired: Acquired | None = None,
        then_pop: ChainedPop | None = None,
    ) -> DrainOutcome:
        """Drain the scope named by the scope ref ``<tenant>/<scopeKey>`` (what drain tasks carry); ``acquired``:
        POP_ACQUIRE already asked for its lease (:meth:`ScopeLease.acquire_ready`). ``then_pop``
        (:meth:`ScopeLease.pop_next`; one Redis, one scope bucket): the commit that releases the scope pops and
        takes the next ready one in the same round trip (:class:`DrainOutcome`). When the drain raises after
        such a commit, the popped scope is given back (its lease released, its drain published) before the
        exception goes on."""
        if acquired is None:  # else the ref was split (and its tenant checked) where it was popped
            tenant, scope_key = split_scope_ref(ref)
            keys = self.ctx.store.keys.for_tenant(tenant)
            acquired = self.lease.acquire(keys, scope_key, now_ms=now_ms(), holder=holder)
        grant, remaining_ms, head = acquired
        if grant is None or head is None:
            # Somebody holds the scope. A live holder drains what we were sent for; a dead one's lease runs out
            # in remaining_ms, so look again then (no spinning, one message per TTL).
            return DrainOutcome(0, "busy", delay_s=remaining_ms / 1000 + 0.05)
        attrs = {"agent.signal.scope_key": grant.scope_key, "agent.signal.fence": grant.fence}
        try:
            with self.telemetry.span("agent_signal.scope.drain", attrs) as span:
                outcome = self._drain_heads(grant, head, then_pop)
                if span is not None:
                    span.set_attribute("agent.signal.processed", outcome.processed)
                    span.set_attribute("agent.signal.drain_next", outcome.next)
        except BaseException:
            if then_pop is not None and then_pop.reply:  # a scope was popped: not ours to drain any more
                self._give_back(then_pop)
                then_pop.reply = None
            raise
        finally:
            self.lease.stop_renewing(grant)
            if grant.unconfirmed_commit is not None:
                self.lease.give_back_unconfirmed_commit(grant)
        if then_pop is None or then_pop.reply is None:
            return outcome
        # read after this scope's renewal stopped: the renewer keeps the popped scope's grant from here
        chained = self.lease.read_popped(self.keys, then_pop.call.pop_token, then_pop.reply)
        return DrainOutcome(
            processed=outcome.processed,
            next=outcome.next,
            delay_s=outcome.delay_s,
            popped=chained,
            retired=chained is None,
        )

    def _give_back(self, chained: ChainedPop) -> None:
        """The scope a commit popped for a drain that raised: released and published again (its head was
        begun: its next drain counts that attempt as a lost delivery). Never raises over the drain's error."""
        try:
            ref = self.lease.give_back(self.keys, chained)
            if ref is not None:
                self.ctx.publish(ref)
        except Exception as exc:  # the lease runs out and the reconcile sweep publishes the scope
            log.warning("a popped scope was not given back (%s)", describe_error(exc))

    def _drain_heads(self, grant: LeaseGrant, head: Head, then_pop: ChainedPop | None = None) -> DrainOutcome:
        """The drain's loop (see the module docstring): runs, their commits, until the scope is idle or handed
        off (``then_pop`` goes to each commit: the one that releases the scope pops the next). Where the store
        sends ahead, the next run's chains run while its commit is in flight (worker/drain/ahead.py)."""
        settings = self.settings
        limit, run_max = settings.max_events_per_drain, settings.commit_batch_max
        # After a lost delivery (the head was processing when its worker died) the whole drain runs one by one, so
        # whichever event killed the worker reaches the head and counts its own attempts; with one attempt
        # allowed, a run's crash would dead-letter its head for another event's fault: no runs of several at all.
        lost_delivery = head.begun is not None and head.begun.previous_state == "processing"
        alone_only = lost_delivery or settings.max_attempts <= 1 or run_max <= 1
        look = Lookahead(not alone_only and settings.drain_ahead and self.store.sends_ahead)
        # the fresh events to know behind the head: the next run's, and going ahead the run after it too
        window = 0 if alone_only else (2 * run_max - 1 if look.enabled else run_max - 1)
        processed, slow = 0, False
        # A turn also ends once it has run for drain_message_budget_s: 200 events of a slow handler held a worker
        # slot for minutes while other tenants' scopes waited (the turn is decided at a commit, which then takes
        # no next head: nothing is begun that this drain will not run)
        turn_ends = time.monotonic() + settings.drain_message_budget_s
        look.known = [] if alone_only else self._peek(grant, head, min(limit, window + 1) - 1)
        while head.code is HeadCode.TAKEN and head.begun is not None:
            room = min(run_max, limit - processed)
            if room <= 0:  # max_events_per_drain: let other scopes have a turn
                self._drop(look.take_carried())
                return self.hand_off(grant, processed, 0)
            works = look.take_carried()
            if not works and not slow and not alone_only:
                speculated = self._speculate(grant, [head.begun, *look.known[: room - 1]])
                if speculated is None:
                    return DrainOutcome(processed, "lost")
                works = speculated
            if not works:  # the head runs alone
                work = run_event(self.ctx, grant, head.begun, batch=False)
                if work.lost or work.outcome is None:
                    count_runs(self.ctx, work)
                    return DrainOutcome(processed, "lost")
                works = [work]
            go_on = processed + len(works) < limit and time.monotonic() < turn_ends
            done = self._commit(
                grant,
                works,
                look,
                window,
                go_on=go_on,
                slow=slow,
                room_after=limit - processed,
                then_pop=then_pop,
            )
            processed += done.committed
            if done.lost:
                return DrainOutcome(processed, "lost")
            slow, next_head = done.slow, done.head
            if next_head is None:  # max_events_per_drain or the turn's time: let other scopes have a turn
                return self.hand_off(grant, processed, 0)
            head = next_head
        if head.code is HeadCode.EMPTY:
            return DrainOutcome(processed, "idle")  # the script released the scope
        return self.hand_off(grant, processed, max(head.not_before_ms - now_ms(), 0))

    def _commit(
        self,
        grant: LeaseGrant,
        works: list[EventWork],
        look: Lookahead,
        window: int,
        *,
        go_on: bool,
        slow: bool,
        room_after: int,
        then_pop: ChainedPop | None = None,
    ) -> RunCommitted:
        """Commit a run; going ahead, the next run's chains run while it is in flight (``room_after``: events the
        drain may still take, this run's included). The commit lists the fresh events after the ones known
        behind the next head, up to the window, and no further than the drain may take."""
        nxt, behind = look.after(len(works))
        skip = len(behind)
        wanted = min(window, room_after - len(works) - 1)  # known behind the next head, after this commit
        next_run: list[EventWork] = []
        meanwhile = None
        if look.enabled and go_on and not slow and nxt is not None and works[-1].outcome == "done":
            upcoming = [nxt, *behind[: min(self.settings.commit_batch_max, room_after - len(works)) - 1]]
            meanwhile = partial(self._run_ahead, grant, upcoming, next_run)
        try:
            done = commit_run(
                self.ctx,
                works,
                go_on=go_on,
                peek=max(wanted - skip, 0),
                peek_skip=skip,
                then_pop=then_pop,
                meanwhile=meanwhile,
            )
        except BaseException:
            self._drop(next_run)  # run ahead for a run no commit will take
            raise
        finally:  # the runs of every walk no commit counted (lost, refused, run again alone)
            for work in works:
                count_runs(self.ctx, work)
        self._drop(look.settle(done, nxt, behind, next_run))
        return done

    def _run_ahead(self, grant: LeaseGrant, events: list[Begun], into: list[EventWork]) -> None:
        into.extend(self._speculate(grant, events) or [])

    def _drop(self, works: list[EventWork]) -> None:
        """Walks run ahead that no commit will take: their handler runs are counted; their events run again in
        the drain's next run (or its next drain's)."""
        for work in works:
            count_runs(self.ctx, work)

    def hand_off(self, grant: LeaseGrant, processed: int, wait_ms: int) -> DrainOutcome:
        """Release the scope but keep it scheduled: the caller publishes its next drain after ``wait_ms``.

        A wait (the head's retry time) is at most ``retry_cap_ms``: a time written by a worker whose clock runs
        hours ahead asked for a countdown longer than the broker's visibility timeout (delivered again and again,
        celery#2481); a drain that comes early finds the head waiting and hands off again. The scope's drain
        marker then covers the wait (HAND_OFF sets it, under our lease), so the reconcile sweep does not publish
        one more drain per sweep for a scope that only waits."""
        wait_ms = min(wait_ms, self.settings.retry_cap_ms)
        marker_px = self.store.schedule_ttl_ms + wait_ms if wait_ms > 0 else 0
        if not self.lease.hand_off(grant, marker_px=marker_px, ttl_ms=self.store.schedule_ttl_ms):
            return DrainOutcome(processed, "lost")
        return DrainOutcome(processed, "again", delay_s=wait_ms / 1000)

    def _batchable(self, begun: Begun) -> bool:
        """A first delivery, of a source type whose chains have met only batch-safe handlers so far."""
        if begun.attempts != 1:
            return False
        unbatchable = self.ctx.unbatchable
        return not unbatchable or event_head(begun.body, begun.source_type)[0] not in unbatchable

    def _peek(self, grant: LeaseGrant, head: Head, count: int) -> list[Begun]:
        """The fresh events right behind the head ACQUIRE took (none when it is not batchable, or nothing waits
        behind it)."""
        if head.begun is None or count <= 0 or head.behind == 0 or not self._batchable(head.begun):
            return []
        k, scope = grant.keys, grant.scope_key
        call = PeekFresh(
            k.inbox(scope), k.fence(scope), grant.fence, k.event_prefix, now_ms(), head.begun.event_id, count
        )
        return begun_list(self.store.scripts.run(call))

    def _speculate(self, grant: LeaseGrant, events: list[Begun]) -> list[EventWork] | None:
        """Run the chains of ``events`` for a run, in order, until one is not batchable or not done; [] when the
        head itself cannot go in a run; None when the lease was lost meanwhile (nothing is committed then)."""
        works: list[EventWork] = []
        try:
            for begun in events:
                if not self._batchable(begun):
                    break
                work = run_event(self.ctx, grant, begun, batch=True)
                if work.lost:
                    for dropped in (*works, work):  # nothing of this speculation is committed
                        count_runs(self.ctx, dropped)
                    return None
                if work.unbatchable:
                    count_runs(self.ctx, work)  # decided nothing: it runs again alone
                    self.ctx.unbatchable.add(work.source_type)
                    log.info(
                        "source type %s is not batched here: its chain met a handler that is not batch-safe",
                        work.source_type,
                    )
                    break
                works.append(work)
                if work.outcome != "done":
                    break
        except BaseException:  # a walk raised: the ones before it are not committed either
            for dropped in works:
                count_runs(self.ctx, dropped)
            raise
        return works
