"""The sweeper: scopes with queued events but no live lease and no recent drain get a drain task.

Normally every scope with work has exactly one drain scheduled (the ``sched:{scope}`` marker). Three things
can break that, and this is the liveness device for all of them: a producer that died between storing an
event and publishing its drain; a lease holder paused (SIGSTOP, GC, VM freeze) past its TTL while holding
the only drain message; a broker that lost a message. Every worker process's main thread runs it every
``reconcile_interval_s`` and one of them wins the interval's lock. A duplicate drain is harmless: it finds
the lease held or the inbox empty.

A marker's age is its value less its remaining PTTL (every writer sets it with ``PX`` of its
:attr:`EventStore.schedule_ttl_ms` and writes that TTL as its value), so it is measured by the Redis server's
clock alone, whichever process wrote it: a time in it would come from the writer's clock (a web replica whose
clock runs ahead would date it in the future), and our own TTL in place of the writer's would misread a marker
of a door with a longer visibility timeout as young for the difference, each delaying the repair of a lost drain.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from redis.exceptions import RedisError

from worker.core.tenancy import DEFAULT_TENANT
from worker.keys.layout import BadTenant, Keys, split_scope_ref
from worker.store.events import EventStore
from worker.store.server.safety import store_error_reason

__all__ = ["reconcile"]


log = logging.getLogger(__name__)

SWEEP_BATCH = 500  # scopes read per round trip (a backlog of 50,000 queued scopes is 100 round trips)


def reconcile(
    store: EventStore, publish: Callable[[Sequence[str]], None], *, stale_after_ms: int
) -> list[str]:
    """Publish drains for the stranded scopes of every tenant (``publish`` takes a batch at once:
    FairQueue.publish_stranded); returns their scope refs. Tenant by tenant: a store error in one (its slot
    moving between Redis Cluster nodes, its node down) skips that tenant this sweep, not the others (a reshard
    walk saw one moving slot fail the whole sweep)."""
    stranded: list[str] = []
    for tenant in sorted({*store.known_tenants(), DEFAULT_TENANT}):
        if store.deleted_tenants.deleted(tenant):  # its scopes are not made ready again
            continue
        try:
            stranded += _stranded_of(store, store.keys.for_tenant(tenant), stale_after_ms)
        except RedisError as exc:
            log.warning("reconcile sweep: tenant %s skipped: %s", tenant, store_error_reason(exc))
    if stranded:  # all at once: each publish may send one drain_next message past the cap (fair.py)
        publish(stranded)
    return stranded


def _stranded_of(store: EventStore, tenant: Keys, stale_after_ms: int) -> list[str]:
    """The tenant's stranded scope refs, each given a fresh drain marker (its drain is published by the caller)."""
    client = store.client
    published: list[str] = []
    scopes: list[tuple[str, Keys, str]] = []
    for ref in store.scope_refs_of(tenant):
        try:
            ref_tenant, scope_key = split_scope_ref(ref)
        except BadTenant:  # a member from before tenants, or foreign: it names no scope we can drain
            for k in tenant.every_bucket():
                client.srem(k.scopes, ref)
            continue
        scopes.append((ref, store.keys.for_tenant(ref_tenant), scope_key))
    for start in range(0, len(scopes), SWEEP_BATCH):
        chunk = scopes[start : start + SWEEP_BATCH]
        pipe = client.pipeline(transaction=False)
        for _, keys, scope_key in chunk:
            pipe.llen(keys.inbox(scope_key))
            pipe.exists(keys.lease(scope_key))
            pipe.pttl(keys.scheduled(scope_key))
            pipe.get(keys.scheduled(scope_key))
        replies = pipe.execute()
        stranded = []
        for i, (ref, keys, scope_key) in enumerate(chunk):
            depth, leased, marker_pttl_ms, marker = replies[4 * i : 4 * i + 4]
            if depth == 0 or leased:
                continue
            age_ms = store.marker_age_ms(int(marker_pttl_ms), marker)
            if age_ms is not None and age_ms < stale_after_ms:  # a drain was scheduled this recently
                continue
            stranded.append((ref, keys, scope_key))
        if not stranded:
            continue
        pipe = client.pipeline(transaction=False)
        for _, keys, scope_key in stranded:
            pipe.set(keys.scheduled(scope_key), store.schedule_ttl_ms, px=store.schedule_ttl_ms)
        pipe.execute()
        published += [ref for ref, _, _ in stranded]
    return published


def try_reconcile_lock(store: EventStore, interval_ms: int) -> bool:
    """One sweeper per interval across all workers."""
    return bool(store.client.set(store.keys.reconcile_lock, "1", nx=True, px=max(interval_ms - 50, 50)))
