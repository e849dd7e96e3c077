"""The sweeper: scopes with queued events but no live lease and no recent drain get a drain task.

Normally every scope with work has exactly one drain scheduled (the ``sched:{scope}`` marker). Three things
can break that, and this is the liveness device for all of them: a producer that died between storing an
event and publishing its drain; a lease holder paused (SIGSTOP, GC, VM freeze) past its TTL while holding
the only drain message; a broker that lost a message. Every worker process's main thread runs it every
``reconcile_interval_s`` and one of them wins the interval's lock. A duplicate drain is harmless: it finds
the lease held or the inbox empty.

A scope still on its tenant's fair-share ready list (its tenant on the ring) is not stranded: it waits its turn
(under a backlog, longer than the sweep's staleness), and a drain_next message will pop it. Pushing it again put
one more ref of it on the list once per stale period (a kill test's list held 71 to 83 refs for 30 scopes), each
a pop and a lease asked for nothing. The sweep leaves such scopes where they are, with their stale markers (so
each sweep looks again, and pushes one whose ref has left the list with no drain to show for it), and makes sure
a message is out for each (at most the cap) and at least one is sent, past the cap if need be: a list whose
messages the broker lost gets as many as before, and a long backlog one more per sweep
(FairQueue.publish_stranded).

A marker's age is its value less its remaining PTTL (every writer sets it with ``PX`` of its
:attr:`EventStore.schedule_ttl_ms` and writes that TTL as its value), so it is measured by the Redis server's
clock alone, whichever process wrote it: a time in it would come from the writer's clock (a web replica whose
clock runs ahead would date it in the future), and our own TTL in place of the writer's would misread a marker
of a door with a longer visibility timeout as young for the difference, each delaying the repair of a lost drain.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from redis.exceptions import RedisError

from worker.core.tenancy import DEFAULT_TENANT
from worker.keys.layout import BadTenant, Keys, split_scope_ref
from worker.store.events import EventStore
from worker.store.server.safety import store_error_reason
from worker.telemetry.log_privacy import describe_error

__all__ = ["StrandedPublish", "reconcile"]


log = logging.getLogger(__name__)

SWEEP_BATCH = 500  # scopes read per round trip (a backlog of 50,000 queued scopes is 100 round trips)


class StrandedPublish(Protocol):
    """How the sweep publishes (FairQueue.publish_stranded): drains for ``refs``, and drain_next messages for
    ``waiting`` scopes left on their ready lists past the staleness (at least one)."""

    def __call__(self, refs: Sequence[str], *, waiting: int) -> None: ...


@dataclass(frozen=True, slots=True)
class _Found:
    stranded: list[str]  # scope refs given a fresh marker, their drains to publish
    waiting: int  # stale scopes left on their tenant's ready list


def reconcile(store: EventStore, publish: StrandedPublish, *, stale_after_ms: int) -> list[str]:
    """Publish drains for the stranded scopes of every tenant (``publish`` takes a batch at once); returns their
    scope refs. Tenant by tenant: a store error in one (its slot moving between Redis Cluster nodes, its node
    down) skips that tenant this sweep, not the others (a reshard walk saw one moving slot fail the whole
    sweep)."""
    stranded: list[str] = []
    waiting = 0
    for tenant in sorted({*store.known_tenants(), DEFAULT_TENANT}):
        if store.deleted_tenants.deleted(tenant):  # its scopes are not made ready again
            continue
        try:
            found = _stranded_of(store, store.keys.for_tenant(tenant), stale_after_ms)
        except RedisError as exc:
            log.warning("reconcile sweep: tenant %s skipped: %s", tenant, store_error_reason(exc))
            continue
        stranded += found.stranded
        waiting += found.waiting
    if waiting:
        log.info(
            "reconcile: %d scope(s) waiting past %d ms, left on their ready lists", waiting, stale_after_ms
        )
    if stranded or waiting:  # at once: each publish may send one drain_next message past the cap (fair.py)
        publish(stranded, waiting=waiting)
    return stranded


def _stranded_of(store: EventStore, tenant: Keys, stale_after_ms: int) -> _Found:
    """The tenant's stranded scope refs, each given a fresh drain marker (their drains published by the caller),
    and how many stale scopes wait on its ready list (fair share: read once, only when a scope looks stranded)."""
    client = store.client
    scopes: list[tuple[str, Keys, str]] = []
    for ref in store.scope_refs_of(tenant):
        try:
            ref_tenant, scope_key = split_scope_ref(ref)
        except BadTenant:  # a member from before tenants, or foreign: it names no scope we can drain
            for k in tenant.every_bucket():
                client.srem(k.scopes, ref)
            continue
        scopes.append((ref, store.keys.for_tenant(ref_tenant), scope_key))
    stale: list[tuple[str, Keys, str]] = []
    for start in range(0, len(scopes), SWEEP_BATCH):
        chunk = scopes[start : start + SWEEP_BATCH]
        pipe = client.pipeline(transaction=False)
        for _, keys, scope_key in chunk:
            pipe.llen(keys.inbox(scope_key))
            pipe.exists(keys.lease(scope_key))
            pipe.pttl(keys.scheduled(scope_key))
            pipe.get(keys.scheduled(scope_key))
        replies = pipe.execute()
        for i, (ref, keys, scope_key) in enumerate(chunk):
            depth, leased, marker_pttl_ms, marker = replies[4 * i : 4 * i + 4]
            if depth == 0 or leased:
                continue
            age_ms = store.marker_age_ms(int(marker_pttl_ms), marker)
            if age_ms is not None and age_ms < stale_after_ms:  # a drain was scheduled this recently
                continue
            stale.append((ref, keys, scope_key))
    # Read after every scope's state: a ref pushed since is waiting too. Only the stranded get a fresh marker: a
    # waiting scope keeps its stale one, so the next sweep looks at it again, and pushes it if its ref has left
    # the list with no drain to show for it (a popper killed before its lease, a pop whose reply was lost). A
    # stranded scope released between the read and its marker is pushed, a duplicate at worst.
    ready = _ready_refs(store, tenant) if stale else set()
    stranded = [one for one in stale if one[0] not in ready]
    for start in range(0, len(stranded), SWEEP_BATCH):
        pipe = client.pipeline(transaction=False)
        for _, keys, scope_key in stranded[start : start + SWEEP_BATCH]:
            pipe.set(keys.scheduled(scope_key), store.schedule_ttl_ms, px=store.schedule_ttl_ms)
        pipe.execute()
    return _Found([ref for ref, _, _ in stranded], len(stale) - len(stranded))


def _ready_refs(store: EventStore, tenant: Keys) -> set[str]:
    """The tenant's ready list (StoreReads.ready_refs); none when it cannot be read (the ``{fair}`` slot moving or
    down): its stale scopes are then pushed again, as before the list was read (which fails too while the slot is
    down: the next sweep tries again)."""
    try:
        return store.ready_refs(tenant)
    except RedisError as exc:
        log.warning(
            "reconcile sweep: the ready lists could not be read (%s): tenant %s's stale scopes are pushed again",
            describe_error(exc),
            tenant.tenant,
        )
        return set()


def try_reconcile_lock(store: EventStore, interval_ms: int) -> bool:
    """One sweeper per interval across all workers."""
    return bool(store.client.set(store.keys.reconcile_lock, "1", nx=True, px=max(interval_ms - 50, 50)))
