"""The outbox: outbound calls (webhooks, agent runs) committed with the event, delivered by a relay.

A handler never calls another system itself. ``ctx.outbox(kind, payload, key=…)`` stages an
:class:`OutboxRecord` as writes in the handler's effect buffer, after all of the handler's own writes:
``SET NX outbox:{scope}:<id> <json> EX <retention>``, its id in the event's index ``outbox-of:{scope}:<event>``,
and ``ZADD NX outbox-due <now> "<tenant>/<scope>\\x1f<id>"`` (each tenant's own, per scope bucket). They land with the action's idempotency mark (APPLY) or
with the event's ``done`` commit (COMMIT), fenced like every staged write, so a paused or partitioned lease
holder whose commit is refused leaves no record, and one idempotency key makes one record.

The :class:`OutboxRelay` (a thread in every worker's main process) claims one due record at a time with
OUTBOX_CLAIM (its due time moves one lease ahead, on Redis's clock: that deadline is the claim), counts the
attempt, hands the record to the deliverer its plugin registered for its ``kind``, and settles it with
OUTBOX_SETTLE only while its claim still holds: ``delivered``; or retried with full-jitter backoff
(``worker/core/retry.py``); or ``dead`` after ``outbox_max_attempts`` (at once when the deliverer raises
PermanentFailure: the receiver refused the call itself). A kind no deliverer of this process knows is a failed
attempt too. A dead record joins its bucket's dead index (``outbox-dead``), where ``GET /v1/outbox/dead`` lists it
and ``POST /v1/outbox/redrive`` sends it again (worker/outbox/dead.py) until the outbox retention ends. A delivery slower than the lease can be
repeated by another relay, which the idempotency key covers; it can no longer overwrite the other's result.
Delivery is at least once, so every record carries its idempotency ``key`` (the deliverer passes it on as
``Idempotency-Key`` / ``webhook-id``) and a receiver that dedupes sees each effect once.

Two claim modes share that one record lifecycle (:meth:`OutboxRelay._attempt`). **Parallel** (``outbox-due``):
relays in several processes claim records, as above, and each delivers up to ``concurrency`` at once
(``AGENT_SIGNAL_OUTBOX_CONCURRENCY``) on a pool of threads, a tenant at most half of them: one receiver that
hangs until its timeout held up every tenant's calls on that worker when a relay delivered one at a time. **Ordered** (``journal-due``, scope
buckets only): a scope's journaled writes to the tenant's home slot (a conversation line, a receipt) and its
follow-ups for other buckets (worker/store/journal.py) must land in the order its commits made them, so one relay
at a time holds the bucket's ``journal-lock`` (a token, PX the lease, renewed before each record) and takes the
head only; a record that fails stays at the head and the lock is left to expire after its backoff, so nothing
behind it overtakes it; after ``outbox_max_attempts`` it is settled dead and the rest go on. A relay that stalls
past its lease loses the lock to another; the record it was applying is then applied again, which the
once-marker (JOURNAL_APPLY) or the follow-up's dedupe identity absorbs.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from redis.exceptions import RedisError

from worker.chain.outbox_records import SEPARATOR, Deliverer, OutboxRecord, outbox_commands
from worker.core.clock import now_ms
from worker.core.errors import PermanentFailure, RetryLater
from worker.core.retry import backoff_ms
from worker.core.tenancy import DEFAULT_TENANT, working_for
from worker.keys.layout import BucketKeys, Keys, split_scope_ref
from worker.outbox.delivery_pool import DeliveryPool
from worker.store.calls import JournalSettle, OutboxClaim, OutboxSettle, Release, Renew
from worker.store.events import EventStore
from worker.store.journal import journal_score_us
from worker.store.server.safety import store_error_reason
from worker.telemetry.log_privacy import describe_error, without_url_secrets

__all__ = ["Attempt", "Deliverer", "OutboxRecord", "OutboxRelay", "outbox_commands", "records_of_event"]

log = logging.getLogger(__name__)
SKIP_LOG_EVERY_S = 60.0  # a tenant's refused buckets are logged this often at most


def records_of_event(keys: Keys, store: EventStore, scope_key: str, event_id: str) -> list[dict[str, Any]]:
    """The outbox records one of ``keys``' tenant's events staged, for its run detail (oldest first)."""
    ids = sorted(str(i) for i in store.client.smembers(keys.outbox_of_event(scope_key, event_id)))
    if not ids:
        return []
    raw = store.client.mget([keys.outbox_record(scope_key, i) for i in ids])
    records = [OutboxRecord.from_json(r) for r in raw if r is not None]
    return [r.to_public() for r in sorted(records, key=lambda r: r.created_at)]


@dataclass(frozen=True, slots=True)
class Attempt:
    """What one delivery attempt of a record came to: ``delivered``, ``retry`` (at ``retry_at_ms``), ``dead``,
    or ``skipped`` (another relay took it over, or the record is gone)."""

    verdict: str
    retry_at_ms: int | None = None


# Attempts a record of a kind no deliverer here knows gets before it is dead: a rolling deploy's older workers may
# claim a new kind's records for a while (full-jitter backoff under a 60 s cap: about half an hour), a plugin removed for good
# leaves them dead (listed, redriven once a worker knows the kind).
UNKNOWN_KIND_ATTEMPTS = 60
# The longest wait a deliverer's RetryLater (a receiver's Retry-After) sets before the next attempt: a receiver
# asking for a day is tried again within the hour (its attempts still count toward the outbox's maximum).
MAX_RETRY_LATER_MS = 60 * 60 * 1000


def _no_deliverer(record: OutboxRecord) -> None:
    """A kind no plugin of this process delivers (a rolling deploy, or a plugin removed): a failed attempt, retried
    with backoff (another worker may know the kind meanwhile), dead after :data:`UNKNOWN_KIND_ATTEMPTS` (it was
    never counted and expired unseen after the outbox retention)."""
    raise LookupError(f"no deliverer for outbox kind {record.kind!r} in this worker")


def _claimed_elsewhere(record: OutboxRecord) -> None:
    """The record's claim is another relay's now: its settle wrote nothing. (The record is a field, never the
    message: worker/telemetry/log_privacy.py.)"""
    log.warning(
        "outbox record was claimed again by another relay; not settling it here",
        extra={"outboxRecord": record.id},
    )


def _dead_at(record: OutboxRecord) -> str:
    """The dead index's score for a record settled now: its time when it is dead, else ''."""
    return str(now_ms()) if record.state == "dead" else ""


@dataclass
class OutboxRelay:
    """Claims due records and delivers them, in parallel or, for a bucket's journal, in order (module docstring)."""

    store: EventStore
    deliverers: Mapping[str, Deliverer]
    max_attempts: int = 10
    lease_ms: int = 60_000
    base_ms: int = 500
    cap_ms: int = 60_000
    batch: int = 50
    # Deliveries at once (parallel mode), on a pool of threads; 1: each in the relay's own thread, settled before
    # run_once returns (what tests that count run_once's deliveries use). A tenant holds at most half of them.
    concurrency: int = 1
    stop_grace_s: float = 10.0  # a stop waits this long for deliveries in flight (then their claims lapse)
    delivered: int = field(default=0, init=False)
    _turn: int = field(default=0, init=False)  # where the next pass's round of tenant buckets starts
    _pool: DeliveryPool = field(init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _skip_logged: dict[str, float] = field(default_factory=dict, init=False, repr=False)  # tenant -> next log

    def __post_init__(self) -> None:
        self._pool = DeliveryPool(self.concurrency)

    @property
    def per_tenant(self) -> int:
        """The deliveries one tenant may have in flight at once."""
        return self._pool.per_tenant

    def run_once(self) -> int:
        """Deliver up to ``batch`` records due now, each under its own claim, and (with scope buckets) up to
        ``batch`` journal records in order; returns how many were delivered (with ``concurrency`` above 1, how
        many were claimed: the pool delivers them after this returns)."""
        # the default tenant always: its records may predate the tenants set (an upgrade), as migrate assumes
        tenants = {*self.store.known_tenants(), DEFAULT_TENANT}
        deleted = (
            self.store.deleted_tenants.deleted
        )  # their records are not delivered, nor their journal applied
        every = [k for t in sorted(tenants) if not deleted(t) for k in self._buckets(t)]
        done = 0
        # the journal first: its records are writes to this Redis (receipts, follow-ups), quick
        if self.store.keys.buckets > 1:
            journaled = self._ordered(every, self.batch)
            with self._lock:
                self.delivered += journaled
            done += journaled
        return done + self._parallel(every, self.batch)

    def _buckets(self, tenant: str) -> list[BucketKeys]:
        return self.store.keys.for_tenant(tenant).every_bucket()

    def run_forever(self, stop: threading.Event, interval_s: float) -> None:
        """Poll every ``interval_s``; while the store fails, back off up to 5 s (one log line per failure)."""
        wait_s = interval_s
        try:
            while not stop.wait(wait_s):
                try:
                    while self.run_once() and not stop.is_set():
                        pass
                    wait_s = interval_s
                except Exception as exc:
                    log.warning("outbox relay pass failed: %s", describe_error(exc))
                    wait_s = min(max(wait_s * 2, interval_s), 5.0)
        finally:
            if not self._pool.wait_idle(self.stop_grace_s):  # their claims lapse: another relay delivers them
                log.warning("outbox relay stopped with %d deliveries still running", self._pool.in_flight())

    # ---- one record's lifecycle (both modes) -------------------------------------------------------

    def _record_key(self, member: str) -> str:
        ref, _, record_id = member.partition(SEPARATOR)
        tenant, scope_key = split_scope_ref(ref)
        return self.store.keys.for_tenant(tenant).outbox_record(scope_key, record_id)

    def _drop_due(self, due: str, key: str, member: str, score: Callable[[], int]) -> None:
        """Take the due entry of a record read as not pending (gone, delivered or dead). A redrive between that
        read and this ZREM made it pending and added an entry of its own, which the ZREM took: then it is put
        back as the redrive put it (due now; at the journal's tail), else the redrive answered "redriven" for a
        record no set held any more (an audit)."""
        self.store.client.zrem(due, member)
        raw = self.store.client.get(key)
        if raw is not None and OutboxRecord.from_json(raw).state == "pending":
            self.store.client.zadd(due, {member: score()}, nx=True)

    def _pending(self, key: str, record_id: str) -> OutboxRecord | None:
        """The record at ``key`` while it waits to be delivered (None: expired, or settled already)."""
        raw = self.store.client.get(key)
        if raw is None:
            log.error("outbox record expired before it was delivered", extra={"outboxRecord": record_id})
            return None
        record = OutboxRecord.from_json(raw)
        return record if record.state == "pending" else None

    def _attempt(
        self,
        record: OutboxRecord,
        before: Callable[[OutboxRecord], bool] | None = None,
        *,
        grace: bool = True,
    ) -> Attempt:
        """Count an attempt and deliver ``record`` through its kind's deliverer, updating it in place; ``before``
        runs once the attempt is counted and may call the delivery off (another relay took the record). ``grace``:
        a kind no deliverer here knows gets :data:`UNKNOWN_KIND_ATTEMPTS` (not in a journal, whose head holds up
        the rest of its bucket while it is retried)."""
        deliver = self.deliverers.get(record.kind) or _no_deliverer
        record.attempts += 1  # counted before the call: a relay that dies mid-delivery still used an attempt
        if before is not None and not before(record):
            return Attempt("skipped")
        try:
            with working_for(
                record.tenant
            ):  # a plugin task it publishes carries the tenant (deleted: dropped)
                deliver(record)
        except (
            Exception,
            SystemExit,
        ) as exc:  # a deliverer's SystemExit is its failure too (else never dead)
            # in the record (erasure removes it), shown to readers of the outbox: a URL's secrets are not
            record.last_error = without_url_secrets(f"{type(exc).__name__}: {exc}")[:500]
            where = {"outboxRecord": record.id, "eventId": record.event_id or None}
            error = describe_error(exc)
            unknown = grace and record.kind not in self.deliverers
            limit = UNKNOWN_KIND_ATTEMPTS if unknown else self.max_attempts
            if record.attempts >= max(limit, self.max_attempts) or isinstance(exc, PermanentFailure):
                record.state = "dead"
                log.error("outbox record is dead after %d attempts: %s", record.attempts, error, extra=where)
                return Attempt("dead")
            log.warning("outbox record failed (attempt %d): %s", record.attempts, error, extra=where)
            delay_ms = backoff_ms(record.attempts, base_ms=self.base_ms, cap_ms=self.cap_ms)
            if isinstance(exc, RetryLater):  # the receiver said when (Retry-After): not before, within reason
                delay_ms = max(delay_ms, min(int(exc.delay_s * 1000), MAX_RETRY_LATER_MS))
            return Attempt("retry", retry_at_ms=now_ms() + delay_ms)
        record.state, record.delivered_at, record.last_error = "delivered", now_ms(), ""
        return Attempt("delivered")

    # ---- parallel: each record under its own claim -------------------------------------------------

    def _parallel(self, every: list[BucketKeys], budget: int) -> int:
        """Up to ``budget`` claims, one per tenant bucket in turn (each tenant's own due set, each bucket's own:
        its slot on a cluster), starting one further along each pass: a tenant with a backlog or a slow
        receiver took the whole budget, tenants in sorted order, and starved every tenant after it."""
        done = 0
        if not every:
            return 0
        self._turn = (self._turn + 1) % len(every)
        waiting = every[self._turn :] + every[: self._turn]
        while budget > 0 and waiting:
            still = []
            for keys in waiting:
                if budget <= 0:
                    break
                if self.concurrency > 1 and not self._pool.room_for(keys.tenant):
                    continue  # the pool is full, or the tenant's half is taken: a later pass asks again
                try:
                    claimed = self.store.scripts.run(OutboxClaim(keys.outbox_due, self.lease_ms))
                except RedisError as exc:  # this bucket's slot moving, its node down: the other tenants go on
                    self._skipped(keys, exc)
                    continue
                if not claimed:
                    continue  # nothing due there now: not asked again this pass
                still.append(keys)
                budget -= 1
                member, deadline = str(claimed[0]), int(claimed[1])
                if self.concurrency > 1:
                    if not self._pool.claimed_again(member, deadline):  # else: its delivery runs here already
                        self._pool.submit(
                            keys.tenant,
                            member,
                            deadline,
                            partial(self._deliver_safely, keys, member, deadline),
                            lane=member.partition(SEPARATOR)[0],  # its scope: a scope's records in order
                        )
                        done += 1  # claimed: run_forever's pass goes on while there are claims to make
                    continue
                done += self._deliver_safely(keys, member, deadline)
            waiting = still
        return done

    def _deliver_safely(self, keys: BucketKeys, member: str, deadline: int) -> int:
        try:
            return self._deliver_claimed(keys, member, deadline)
        except Exception:  # one bad record must not hold up the others: due again after its lease
            log.exception("outbox record could not be handled", extra={"outboxRecord": member})
            return 0

    def _deliver_claimed(self, keys: BucketKeys, member: str, deadline: int) -> int:
        key = self._record_key(member)
        record = self._pending(key, member.partition(SEPARATOR)[2])
        if record is None:
            self._drop_due(keys.outbox_due, key, member, now_ms)
            return 0

        def settle(current: OutboxRecord, **how: Any) -> bool:
            """Under the newest claim this relay holds on the record (it may have claimed it again meanwhile, and
            between the claim and the pool hearing of it a settle under the older one fails: once more then)."""
            claim = self._pool.deadline_of(member, deadline)
            if self._settle(keys, key, member, claim, current, quiet=True, **how):
                return True
            newer = self._pool.deadline_of(member, deadline)
            if newer != claim:
                return self._settle(keys, key, member, newer, current, **how)
            _claimed_elsewhere(current)
            return False

        attempt = self._attempt(record, lambda counted: settle(counted, keep_claim=True))
        if attempt.verdict == "skipped":
            return 0
        settled = settle(record, retry_at_ms=attempt.retry_at_ms)
        if attempt.verdict != "delivered":
            return 0
        if settled:
            with self._lock:
                self.delivered += 1
        return 1

    def _settle(
        self,
        keys: BucketKeys,
        key: str,
        member: str,
        deadline: int,
        record: OutboxRecord,
        *,
        retry_at_ms: int | None = None,
        keep_claim: bool = False,
        quiet: bool = False,
    ) -> bool:
        """Write the record and its next due time, only while our claim (its due time) still holds; a dead record
        joins the bucket's dead index."""
        next_due = str(deadline) if keep_claim else ("" if retry_at_ms is None else str(retry_at_ms))
        call = OutboxSettle(
            keys.outbox_due,
            key,
            keys.outbox_dead,
            member,
            deadline,
            record.to_json(),
            next_due,
            _dead_at(record),
        )
        reply = self.store.scripts.run(call)
        if not int(reply) and not quiet:
            _claimed_elsewhere(record)
        return bool(int(reply))

    # ---- ordered: a bucket's journal, its head only, under the bucket's lock -----------------------

    def _journal_settle(
        self, keys: BucketKeys, token: str, key: str, member: str, record: OutboxRecord, *, done: bool
    ) -> int:
        """JOURNAL_SETTLE: 1 written, 0 the lock is not ours (nothing written), -1 the record is gone (erased)."""
        dead_at = _dead_at(record) if done else ""
        call = JournalSettle(
            keys.journal_lock,
            key,
            keys.journal_due,
            keys.outbox_dead,
            token,
            member,
            record.to_json(),
            int(done),
            dead_at,
        )
        return int(self.store.scripts.run(call))

    def _ordered(self, every: list[BucketKeys], budget: int) -> int:
        """Scope buckets: each non-empty bucket journal in commit order."""
        pipe = self.store.client.pipeline(transaction=False)
        for keys in every:
            pipe.zcard(keys.journal_due)
        counts = pipe.execute(raise_on_error=False)  # a bucket whose slot is moving answers its error alone
        waiting = []
        for keys, n in zip(every, counts, strict=True):
            if isinstance(n, RedisError):
                self._skipped(keys, n)
            elif int(n):
                waiting.append(keys)
        done = 0
        for keys in waiting:
            if done >= budget:
                break
            try:
                done += self._journal(keys, budget - done)
            except RedisError as exc:
                self._skipped(keys, exc)
        return done

    def _skipped(self, keys: BucketKeys, exc: RedisError) -> None:
        """A bucket the store refused this pass (its slot moving between cluster nodes, its node down): the pass
        goes on with the others (a reshard walk saw one tenant's moving slot stop every tenant's deliveries).
        Logged once a minute per tenant."""
        now = time.monotonic()
        if self._skip_logged.get(keys.tenant, 0.0) <= now:
            self._skip_logged[keys.tenant] = now + SKIP_LOG_EVERY_S
            log.warning("outbox relay: tenant %s skipped: %s", keys.tenant, store_error_reason(exc))

    def _journal(self, keys: BucketKeys, budget: int) -> int:
        """Apply up to ``budget`` due records of ``keys``' bucket in order; returns how many were applied."""
        client, scripts = self.store.client, self.store.scripts
        lock, due = keys.journal_lock, keys.journal_due
        token = secrets.token_hex(8)
        if not client.set(lock, token, nx=True, px=self.lease_ms):
            return 0
        applied, release = 0, True
        try:
            while applied < budget and int(scripts.run(Renew(lock, token, self.lease_ms))):
                head = client.zrange(due, 0, 0)
                if not head:
                    break
                step, retry_at_ms = self._journal_head(keys, token, str(head[0]))
                if step == "hold":  # nothing overtakes it meanwhile: the lock outlives the backoff
                    scripts.run(Renew(lock, token, max(retry_at_ms - now_ms(), 1)))
                    release = False
                    break
                if step == "stop":
                    break
                applied += step == "applied"
        finally:
            if release:
                scripts.run(Release(lock, token))
        return applied

    def _journal_head(self, keys: BucketKeys, token: str, member: str) -> tuple[str, int]:
        """One attempt at the journal's head, under the lock ``token``: ``applied``, ``next`` (gone or dead: the
        head after it comes next), ``hold`` (it failed: retried at the returned time, holding the lock so nothing
        overtakes it) or ``stop`` (another relay holds the lock now). A kind no deliverer here knows is retried
        like any failure, and is dead after the outbox's attempts (no grace in a journal)."""
        key = self._record_key(member)
        record = self._pending(key, member.partition(SEPARATOR)[2])
        if record is None:  # expired, or settled by a relay that stalled
            self._drop_due(keys.journal_due, key, member, journal_score_us)
            return "next", 0
        written = 1

        def counted(counting: OutboxRecord) -> bool:  # the attempt is written before the delivery
            nonlocal written
            written = self._journal_settle(keys, token, key, member, counting, done=False)
            return written == 1

        attempt = self._attempt(record, counted, grace=False)
        if attempt.verdict == "skipped":
            return ("next" if written == -1 else "stop"), 0  # -1: erased meanwhile, its entry dropped
        written = self._journal_settle(keys, token, key, member, record, done=attempt.verdict != "retry")
        if written == 0:
            return "stop", 0
        if written == -1 or attempt.verdict == "dead":
            return "next", 0
        if attempt.verdict == "retry":
            return "hold", attempt.retry_at_ms or 0
        return "applied", 0
