"""The scope lease: at most one *effective* drainer per scope.

Why a lease and not a lock: a lock held by a paused or partitioned process blocks a scope forever, and an
unconditional ``DEL`` (LobeHub's release, quirk §11.10) can free somebody else's lock. A lease expires
(``SET NX PX`` with a random token), is renewed by a background thread every ``lease_renew_interval_s``
through a token-checked ``PEXPIRE``, and is released by a token-checked script. Every grant issues a
fencing number (``INCR fence:{scope}`` in the same script); each state write checks that the number is still
current, so a holder that was paused past its TTL cannot commit after somebody else took the scope
(Kleppmann's fencing tokens; the Redis docs' own advice). The lease is an efficiency device; the fence and
the idempotency lanes are the correctness device.

One :class:`ScopeLease` per process serves every tenant: a grant carries the keys of its scope's tenant (and
bucket), and one renewer thread keeps the one grant a drain holds. A renewal that finds the lease gone sets
``lost``; the drain checks it before every action and the fenced scripts check the number at the write.

A lease that ran out while its holder was paused (a GC pause, a frozen VM) and that nobody took meanwhile is
taken again, by the renewer (RENEW_SCOPE) and by a COMMIT that goes on to the next head: the scope's fencing
number is still the holder's, and every grant moves it, so nobody was granted the scope since. The renewer
also asks that the head be an event the holder began (processing, under its fence): a renewal that lands just
after the holder released the scope (its inbox emptied, a hand-off) must not lease it for another TTL. Without that the
holder's commit (fenced, and rightly accepted) began the next head with no lease behind it; the renewer then
called the lease lost, the drain stopped, and the next drain charged that head a lost delivery (dead with
``max_attempts`` 1) though nothing had failed.

With the lease at enqueue (``lease_at_enqueue``, off by default) the door's enqueue script does a lone scope's
first pop and grant itself, under a token of its own, and the drain_next message carries the reply
(worker/runtime/drain_message.py); :meth:`ScopeLease.adopt` reads it as POP_ACQUIRE's. The message may have
waited: a grant older than a renewal interval is renewed before its drain begins.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import RedisError

from worker.core.replication import NotReplicated
from worker.core.tenancy import BadTenant, split_scope_ref
from worker.keys.layout import HOLDER_SEPARATOR, BucketKeys, EngineKeys, Keys
from worker.store.calls import (
    Acquire,
    HandOff,
    PopAcquire,
    PopNext,
    ReadyPop,
    Release,
    RenewScope,
    ScriptCall,
    UnconfirmedGrant,
)
from worker.store.records import Head, RunReply
from worker.store.replies import CommitCode, HeadCode, ReleaseCode, RenewCode
from worker.store.scripts import Scripts
from worker.telemetry.log_privacy import describe_error

__all__ = ["Acquired", "ChainedPop", "LeaseGrant", "Popped", "ScopeLease"]

log = logging.getLogger(__name__)

# How far ahead of a worker's clock a door's may date a grant and the grant still be taken as fresh (a door's
# clock ahead by any amount would otherwise cost every grant the round trip it saves): hosts' clocks under NTP
# agree far closer, and a grant taken as fresh too long is still fenced.
GRANT_CLOCK_SLACK_MS = 1000


@dataclass(slots=True)
class LeaseGrant:
    """A granted lease: the scope's keys (its tenant's, its bucket's), token, fencing number, and the flag the
    renewer sets when it is lost."""

    keys: BucketKeys
    scope_key: str
    token: str
    fence: int
    lost: threading.Event = field(default_factory=threading.Event)
    # a commit under this grant the replicas did not confirm (AGENT_SIGNAL_WAIT_REPLICAS): its reply on the
    # primary, for the drain to give the grant back (ScopeLease.give_back_unconfirmed_commit)
    unconfirmed_commit: RunReply | None = None


Acquired = tuple[LeaseGrant | None, int, Head | None]  # (grant, ms the holder still has, head): see acquire
Popped = tuple[str, Acquired | None]  # a popped scope ref and what POP_ACQUIRE did with it


@dataclass(slots=True)
class ChainedPop:
    """A drain_next message's next pop, asked of the COMMIT that releases a scope (:meth:`ScopeLease.pop_next`):
    the call's group, and the commit's reply once it ran (``RunReply.popped``: [] nothing was ready and the
    message's ticket is retired, [ref], or [ref, ACQUIRE's reply]; None: no commit popped). It is set as soon
    as the reply is read, so whoever holds it knows what was popped even when the drain raises afterwards."""

    call: PopNext
    reply: list[Any] | None = None


def _popped_scope(reply: Any) -> tuple[str, tuple[str, str] | None]:
    """A non-empty pop reply's ref, and its (tenant, scope key), or None when the ref is not a scope ref."""
    raw = reply[0]
    ref = raw if isinstance(raw, str) else bytes(raw).decode("utf-8")
    try:
        return ref, split_scope_ref(ref)
    except BadTenant:
        return ref, None


class ScopeLease:
    """Acquire, renew (in one daemon thread per process) and release scope leases."""

    def __init__(
        self,
        scripts: Scripts,
        *,
        ttl_s: float,
        renew_interval_s: float,
        run: Callable[[ScriptCall], Any] | None = None,
        window_s: int,
    ) -> None:
        """``run`` runs ACQUIRE (``EventStore.durable``: waits for replicas when configured, so a fencing number
        a failover could hand out again is never used); ``window_s``, the dedupe window (``dedupe_window_s``): how
        long a head the grant finds cancelled is kept."""
        self.scripts = scripts
        self.window_s = window_s
        self.run = run or scripts.run
        self.ttl_ms = int(ttl_s * 1000)
        self.renew_interval_s = renew_interval_s
        self._current: LeaseGrant | None = None
        self._guard = threading.Lock()
        self._thread: threading.Thread | None = None

    def acquire(self, keys: Keys, scope_key: str, *, now_ms: int, holder: str = "") -> Acquired:
        """Try once for ``keys``' tenant's scope. Granted: (grant, 0, head), where the same round trip took the
        inbox's head (and, when the inbox was empty, already released the lease again: head EMPTY, no renewer
        started). Held by someone else: (None, milliseconds they still have, None). ``holder`` (the worker's
        node name) prefixes the lease token, so operators see who holds a scope (``holder|random``)."""
        token = self._token(holder)
        k = keys.for_scope(scope_key)  # with scope buckets: the scope's bucket's indexes
        call = Acquire(
            lease=k.lease(scope_key),
            fence_key=k.fence(scope_key),
            inbox=k.inbox(scope_key),
            sched=k.scheduled(scope_key),
            scopes=k.scopes,
            paused=k.runs("paused"),
            stats=k.stats,
            runs_active=k.runs("status", "active"),
            runs_cancelled=k.runs("status", "cancelled"),
            lane_holders=k.lane_holders,
            token=token,
            ttl_ms=self.ttl_ms,
            ev_prefix=k.event_prefix,
            now_ms=now_ms,
            scope_ref=k.scope_ref(scope_key),
            window_s=self.window_s,
        )
        try:
            reply = self.run(call)
        except NotReplicated as exc:  # not used: given back, so that its attempt does not count
            self._give_back_unconfirmed(k, scope_key, token, exc.reply)
            raise
        return self._granted(k, scope_key, token, reply)

    def _give_back_unconfirmed(self, k: BucketKeys, scope_key: str, token: str, reply: Any) -> None:
        """A grant the replicas did not confirm, given back (UNCONFIRMED_GRANT): while a promoted primary has no
        replica, every drain of its slots is refused so, and each would count a delivery of its head (a healthy
        event dead after ``MAX_ATTEMPTS`` of them, a failover walk). Best effort: a failure leaves the grant to
        run out, as before."""
        if not isinstance(reply, list) or not reply or int(reply[0]) == 0:
            return
        head = Head.parse(reply[1:-1])
        lease = k.lease(scope_key)
        call: ScriptCall = Release(lease, token)
        if head.begun is not None:
            begun = head.begun
            call = UnconfirmedGrant(
                lease, k.event(begun.event_id), token, int(reply[0]), begun.attempts, begun.previous_state
            )
        try:
            self.scripts.run(call)
        except RedisError as exc:
            log.warning(
                "an unconfirmed grant of a scope was not given back (%s): it runs out", describe_error(exc)
            )

    def give_back_unconfirmed_commit(self, grant: LeaseGrant) -> None:
        """The grant of a drain whose commit the replicas did not confirm (``grant.unconfirmed_commit``), given
        back: its lease released (token-checked; a commit that released the scope left nothing to release) and,
        when the commit went on to the scope's next head, that head's attempt uncounted (UNCONFIRMED_GRANT). It
        ran out before, and the next drain counted a delivery of a head no committed chain ran. That head is the
        last committed event's, when the run committed every event it tried or ended before one that was no longer
        the head (ENDED: cancelled, erased): this commit began it, and a chain of this drain ran it at most as a
        batch's speculation, which writes nothing before its own commit, so it is left as a dropped speculation
        leaves it. A run stopped at an event it could not commit (REFUSED, LANE_TAKEN, PARTIAL, ...) keeps that
        event's attempt and its lease is only released (LANE_TAKEN's event could be uncounted too; not done).
        Best effort, as the other give-backs; a renewer tick already in flight can take a lease only released
        back (the head is still ours): it then runs out, as before. Never under a commit that popped a next
        scope: a drain_next message's commit pops only where nothing waits for replicas (``commit_pops_next``)."""
        run, grant.unconfirmed_commit = grant.unconfirmed_commit, None
        if run is None:
            return
        grant.lost.set()  # a renewer tick not yet begun leaves it alone
        lease = grant.keys.lease(grant.scope_key)
        ran_all = run.code in (CommitCode.COMMITTED, CommitCode.ENDED) and run.replies
        last = run.replies[-1] if ran_all and run.replies[-1].code is CommitCode.COMMITTED else None
        begun = None if last is None or last.head is None else last.head.begun
        call: ScriptCall = Release(lease, grant.token)
        if begun is not None:
            event = grant.keys.event(begun.event_id)
            call = UnconfirmedGrant(
                lease, event, grant.token, grant.fence, begun.attempts, begun.previous_state
            )
        try:
            self.scripts.run(call)
        except RedisError as exc:
            log.warning(
                "an unconfirmed commit's grant was not given back (%s): it runs out", describe_error(exc)
            )

    def _give_back_popped(self, keys: EngineKeys, token: str, popped: Any) -> None:
        """:meth:`_give_back_unconfirmed` for POP_ACQUIRE's reply ``[ref, ACQUIRE's reply]`` (nothing popped: no-op)."""
        if not isinstance(popped, list) or len(popped) < 2 or (scope := _popped_scope(popped)[1]) is None:
            return
        tenant, scope_key = scope
        self._give_back_unconfirmed(keys.for_tenant(tenant).for_scope(scope_key), scope_key, token, popped[1])

    def acquire_ready(
        self, keys: EngineKeys, ready: ReadyPop, *, now_ms: int, holder: str = ""
    ) -> Popped | None:
        """READY_POP and ACQUIRE in one round trip (POP_ACQUIRE; one Redis with one scope bucket only: the script
        builds the scope's keys from the ref it pops). None: nothing was ready, and ``ready``'s ticket is retired.
        Else (ref, what :meth:`acquire` returns), or (ref, None) for a ref that is not ``<tenant>/<scopeKey>``
        (nothing taken: the two-step drain refuses it)."""
        token = self._token(holder)
        call = PopAcquire(
            ready.ring,
            ready.tickets,
            ready.ready_prefix,
            ready.ticket_ttl_ms,
            keys.prefix,
            token,
            self.ttl_ms,
            now_ms,
            self.window_s,
        )
        try:
            reply = self.run(call)
        except NotReplicated as exc:
            self._give_back_popped(keys, token, exc.reply)  # as acquire's (the sweep readies the scope again)
            raise
        return self.read_popped(keys, token, reply)

    def pop_next(self, keys: EngineKeys, ready: ReadyPop, *, holder: str = "") -> ChainedPop:
        """What COMMIT needs to do POP_ACQUIRE's work once it released its scope (one Redis, one scope bucket):
        the drain_next message's next scope popped and granted in the commit's round trip. Its reply is read
        by :meth:`read_popped` with this call's token."""
        call = PopNext(
            ring=ready.ring,
            tickets=ready.tickets,
            ready_prefix=ready.ready_prefix,
            ticket_ttl_ms=ready.ticket_ttl_ms,
            key_prefix=keys.prefix,
            pop_token=self._token(holder),
        )
        return ChainedPop(call)

    def read_popped(self, keys: EngineKeys, token: str, reply: Any) -> Popped | None:
        """POP_ACQUIRE's reply (or a commit's popped one), as :meth:`acquire_ready` returns it; the renewer keeps
        the grant from here."""
        if not reply:
            return None
        ref, scope = _popped_scope(reply)
        if len(reply) < 2 or scope is None:  # the Lua checks for a slash only: the two-step drain refuses it
            return ref, None
        tenant, scope_key = scope
        return ref, self._granted(keys.for_tenant(tenant).for_scope(scope_key), scope_key, token, reply[1])

    def adopt(
        self, keys: EngineKeys, token: str, granted_ms: int, popped: Any, *, now_ms: int
    ) -> Popped | None:
        """A pop the enqueue script did for a drain_next message (the lease at enqueue: ``popped`` is
        POP_ACQUIRE's reply, taken under ``token`` at ``granted_ms`` by the door's clock), read as
        :meth:`read_popped` reads one. The message may have waited (every worker busy, or none running): a grant
        older than a renewal interval, or dated more than GRANT_CLOCK_SLACK_MS ahead of this clock, is renewed
        before its drain begins. RENEW_SCOPE takes a lease that ran out again when nobody took the scope since;
        else the grant is lost (``lost`` set) and the drain does no action (it stops at the first; whoever took
        the scope counts the attempt this grant began as a lost delivery)."""
        found = self.read_popped(keys, token, popped)
        grant = None if found is None or found[1] is None else found[1][0]
        head = None if found is None or found[1] is None else found[1][2]
        if grant is not None and head is not None and head.code is not HeadCode.EMPTY:
            age_ms = now_ms - granted_ms
            if not -GRANT_CLOCK_SLACK_MS <= age_ms <= self.renew_interval_s * 1000:
                try:
                    self.tick(grant)
                except BaseException:  # no drain will run this grant: the renewer must not keep it either
                    self.stop_renewing(grant)
                    raise
        return found

    def give_back(self, keys: EngineKeys, chained: ChainedPop) -> str | None:
        """A scope a commit popped and granted that its drain will not drain (the drain raised after the
        commit): its lease released (token-checked), its ref returned for the caller to publish. None when
        nothing was granted."""
        reply = chained.reply
        if not reply or len(reply) < 2 or int(reply[1][0]) == 0:
            return None
        ref, scope = _popped_scope(reply)
        if scope is None:
            return None
        tenant, scope_key = scope
        lease = keys.for_tenant(tenant).for_scope(scope_key).lease(scope_key)
        self.scripts.run(Release(lease, chained.call.pop_token))
        return ref

    @staticmethod
    def _token(holder: str) -> str:
        return f"{holder}{HOLDER_SEPARATOR}{secrets.token_hex(12)}" if holder else secrets.token_hex(16)

    def _granted(self, k: BucketKeys, scope_key: str, token: str, reply: Any) -> Acquired:
        """ACQUIRE's reply read (the renewer started when a head was taken)."""
        fence = int(reply[0])
        if fence == 0:
            return None, max(int(reply[1]), 0), None
        grant = LeaseGrant(keys=k, scope_key=scope_key, token=token, fence=fence)
        head = Head.parse(reply[1:-1], behind=max(int(reply[-1]) - 1, 0))  # the length counts the head
        if head.code is not HeadCode.EMPTY:
            self._start_renewer(grant)
        return grant, 0, head

    def renew(self, grant: LeaseGrant) -> bool:
        """Keep ``grant``'s lease (RENEW_SCOPE); False, and ``grant.lost`` set, when it is not ours any more."""
        return self._renew(grant) is RenewCode.RENEWED

    def _renew(self, grant: LeaseGrant) -> RenewCode:
        """RENEW_SCOPE's code (:class:`~worker.store.replies.RenewCode`)."""
        k, scope = grant.keys, grant.scope_key
        call = RenewScope(
            k.lease(scope),
            k.fence(scope),
            k.inbox(scope),
            grant.token,
            self.ttl_ms,
            grant.fence,
            k.event_prefix,
        )
        code = RenewCode(int(self.scripts.run(call)))
        if code is not RenewCode.RENEWED:
            grant.lost.set()
        return code

    def _start_renewer(self, grant: LeaseGrant) -> None:
        """Make ``grant`` the one the process's renewer thread keeps alive (one thread per process, started on
        first use: a drain holds one lease at a time, and a thread per drain costs more than the drain)."""
        with self._guard:
            self._current = grant
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._renew_forever, name="lease-renewer", daemon=True)
                self._thread.start()

    def _renew_forever(self) -> None:
        # Renews at most renew_interval_s after a grant and then every renew_interval_s; a grant taken just
        # before a tick is renewed early, which is harmless.
        while True:
            time.sleep(self.renew_interval_s)
            with self._guard:
                grant = self._current
            if grant is None or grant.lost.is_set():
                continue
            try:
                self.tick(grant)
            except Exception:  # a Redis hiccup: try again next tick; the TTL covers two misses
                log.exception("lease renewal failed")

    def tick(self, grant: LeaseGrant) -> RenewCode:
        """One renewal of the renewer's (RENEW_SCOPE's code); "lease lost" is logged only when another holder has
        the scope: a tick that lands after the drain's own release finds it GONE, and nothing was lost."""
        code = self._renew(grant)
        if code is RenewCode.TAKEN_BY_ANOTHER:
            log.warning("lease lost", extra={"scopeKey": grant.scope_key, "fence": grant.fence})
        return code

    def stop_renewing(self, grant: LeaseGrant | None = None) -> None:
        """Stop renewing ``grant`` (None: whichever the renewer keeps); a later grant it keeps now stays."""
        with self._guard:
            if grant is None or self._current is grant:
                self._current = None

    def hand_off(self, grant: LeaseGrant, *, marker_px: int = 0, ttl_ms: int = 0) -> bool:
        """Token-checked release that keeps the scope scheduled (with ``marker_px``, its drain marker set to
        expire that far ahead, while the lease was ours, holding ``ttl_ms``: the schedule TTL the wait is added
        to); False when another holder owns the lease."""
        if marker_px and ttl_ms <= 0:
            raise ValueError("a hand-off's drain marker needs the schedule TTL it holds (ttl_ms)")
        k, scope = grant.keys, grant.scope_key
        call = HandOff(k.lease(scope), k.scheduled(scope), grant.token, marker_px, ttl_ms)
        return ReleaseCode(int(self.scripts.run(call))) is ReleaseCode.RELEASED
