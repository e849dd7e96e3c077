"""The sweeper: scopes with queued events but no live lease and no recent drain get a drain task.

Normally every scope with work has exactly one drain scheduled (the ``sched:{scope}`` marker). Three things
can break that, and this is the liveness device for all of them: a producer that died between storing an
event and publishing its drain; a lease holder paused (SIGSTOP, GC, VM freeze) past its TTL while holding
the only drain message; a broker that lost a message. Every worker process's main thread runs it every
``reconcile_interval_s`` and one of them wins the interval's lock. A duplicate drain is harmless: it finds
the lease held or the inbox empty.
"""

from __future__ import annotations

from collections.abc import Callable

from worker.keys import BadTenant, split_scope_ref
from worker.store import EventStore, now_ms

__all__ = ["reconcile"]


def reconcile(store: EventStore, publish: Callable[[str], None], *, stale_after_ms: int) -> list[str]:
    """Publish a drain for each stranded scope of every tenant; returns the scope refs it published for."""
    client = store.client
    published: list[str] = []
    now = now_ms()
    for ref in store.active_scope_refs():
        try:
            tenant, scope_key = split_scope_ref(ref)
        except BadTenant:  # a member from before tenants, or foreign: it names no scope we can drain
            client.srem(store.keys.scopes, ref)
            continue
        keys = store.keys.for_tenant(tenant)
        pipe = client.pipeline(transaction=False)
        pipe.llen(keys.inbox(scope_key))
        pipe.exists(keys.lease(scope_key))
        pipe.get(keys.scheduled(scope_key))
        depth, leased, scheduled_at = pipe.execute()
        if depth == 0 or leased:
            continue
        if scheduled_at is not None and now - int(scheduled_at) < stale_after_ms:
            continue
        client.set(keys.scheduled(scope_key), now, px=store.schedule_ttl_ms)
        publish(ref)
        published.append(ref)
    return published


def try_reconcile_lock(store: EventStore, interval_ms: int) -> bool:
    """One sweeper per interval across all workers."""
    return bool(store.client.set(store.keys.reconcile_lock, "1", nx=True, px=max(interval_ms - 50, 50)))
