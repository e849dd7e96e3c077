"""Engine-wide state as Prometheus gauges, read from Redis when scraped: served once (``/metrics/state``), not
per process, so no replica counts it again.

* ``agent_signal_backlog_events{queue,tenant}``: events accepted and not yet done or dead (queued, waiting for
  a retry, or running); ``GET /v1/backlog`` answers it too (``eventsWaiting``).
* ``agent_signal_backlog_paused_events{queue,tenant}``: of them, those queued in paused scopes (``eventsPaused``),
  and ``agent_signal_backlog_runnable_events{queue,tenant}``: the backlog less those (``eventsRunnable``), which
  KEDA scales workers on. Both from :func:`runnable_backlog`, the one ``GET /v1/backlog`` answers from.
  The broker holds one drain message per scope, not per event, so its queue length is not the backlog.
* ``agent_signal_stuck_scopes{tenant}``: scopes with queued events, no lease, not waiting on their tenant's ready
  list and no live drain scheduled: what nothing would drain (the reconcile sweep re-publishes them; a non-zero
  value that stays is worth a look: ``GET /v1/scopes?state=stuck``). A backlog waiting its turn is not counted.
* ``agent_signal_backlog_oldest_seconds{tenant}``: how long the oldest event at the head of a scope waiting for a
  drain (not paused, not running) has waited since its first enqueue (0: none waits). With every worker down it grows by a second a second: the alert that says
  nothing drains (a walk stopped every worker for minutes and /readyz, the backlog and the console's cards said
  only "more").
* ``agent_signal_workers``: worker processes whose heartbeat (written every ``AGENT_SIGNAL_RECONCILE_INTERVAL_S``)
  is at most four intervals old, as ``agent-signal probe worker`` reads its file; a clean stop removes its beat.
* ``agent_signal_dlq_size{tenant}``, ``agent_signal_active_scopes{tenant}`` (scopes with queued events, not
  paused: a paused scope leaves the registry it counts until resumed),
  ``agent_signal_outbox_dead{tenant}`` (outbound calls that failed every attempt: ``GET /v1/outbox/dead``), and the
  store's safety gauges.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from worker.core.clock import now_ms
from worker.core.tenancy import DEFAULT_TENANT
from worker.keys.layout import BucketKeys
from worker.ops.scope_control import list_scopes
from worker.ops.workers_view import is_alive
from worker.store.events import EventStore
from worker.store.server.safety import current_safety

__all__ = ["backlog", "live_workers", "paused_backlog", "runnable_backlog", "state_exposition"]

STUCK_SCAN_MAX = 100_000  # scopes per tenant looked at for the stuck gauge at one scrape


def live_workers(store: EventStore) -> int:
    """Worker processes whose heartbeat in ``workers`` is fresh (:func:`worker.ops.workers_view.is_alive`)."""
    now = now_ms()
    return sum(1 for at in store.client.hvals(store.keys.workers) if is_alive(at, now, store.settings))


def backlog(store: EventStore) -> dict[str, int]:
    """tenant -> events waiting or running (the ``queued`` count of its stats), one pipelined read."""
    tenants = store.known_tenants() or [DEFAULT_TENANT]
    every = [(t, k) for t in tenants for k in store.keys.for_tenant(t).every_bucket()]  # scope buckets: each
    pipe = store.client.pipeline(transaction=False)
    for _, k in every:
        pipe.hget(k.stats, "queued")
    total = dict.fromkeys(tenants, 0)
    for (tenant, _), v in zip(every, pipe.execute(), strict=True):
        total[tenant] += int(v or 0)
    return {t: max(n, 0) for t, n in total.items()}


def paused_backlog(store: EventStore, tenants: list[str]) -> dict[str, int]:
    """tenant -> the length of its paused scopes' inboxes: events no worker can run until an operator resumes
    them, give or take two (an event cancelled there stays in the inbox until a drain pops it, and a head that was
    running when the scope was paused finishes). Two pipelined reads: one per bucket, then one per paused scope
    (``AGENT_SIGNAL_TENANT_MAX_PAUSED_SCOPES``, 10,000 by default, bounds it; 0 lifts the bound)."""
    every = [(t, k) for t in tenants for k in store.keys.for_tenant(t).every_bucket()]
    pipe = store.client.pipeline(transaction=False)
    for _, k in every:
        pipe.hkeys(k.runs("paused"))
    inboxes: list[tuple[str, str]] = []
    for (tenant, _), scopes in zip(every, pipe.execute(), strict=True):
        keys = store.keys.for_tenant(tenant)
        inboxes += [(tenant, keys.for_scope(scope).inbox(scope)) for scope in scopes]  # decoded replies
    for _, inbox in inboxes:
        pipe.llen(inbox)
    paused = dict.fromkeys(tenants, 0)
    for (tenant, _), n in zip(inboxes, pipe.execute() if inboxes else [], strict=True):
        paused[tenant] += int(n)
    return paused


def runnable_backlog(store: EventStore) -> tuple[dict[str, int], dict[str, int]]:
    """(tenant -> events waiting, tenant -> of them, in paused scopes), the second clamped to the first per
    tenant: one tenant's count of its paused inboxes (which keeps cancelled events) never hides another's. Each
    tenant's runnable count (KEDA's ``eventsRunnable``) is the first less the second."""
    waiting = backlog(store)
    paused = paused_backlog(store, sorted(waiting))
    return waiting, {t: min(paused.get(t, 0), n) for t, n in waiting.items()}


class _StateCollector:
    """A prometheus_client collector over one store (built per scrape)."""

    def __init__(self, store: EventStore, queue: str) -> None:
        self.store, self.queue = store, queue

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        store = self.store
        waiting, paused = runnable_backlog(store)
        backlog_g = GaugeMetricFamily(
            "agent_signal_backlog_events",
            "Events accepted and not yet done or dead (queued, waiting for a retry, or running).",
            labels=["queue", "tenant"],
        )
        paused_g = GaugeMetricFamily(
            "agent_signal_backlog_paused_events",
            "Of the backlog, events queued in paused scopes (GET /v1/backlog eventsPaused).",
            labels=["queue", "tenant"],
        )
        runnable_g = GaugeMetricFamily(
            "agent_signal_backlog_runnable_events",
            "The backlog less the events of paused scopes: what workers can run (GET /v1/backlog "
            "eventsRunnable, which KEDA scales workers on).",
            labels=["queue", "tenant"],
        )
        stuck_g = GaugeMetricFamily(
            "agent_signal_stuck_scopes",
            "Scopes with queued events, no lease, not on a ready list and no live drain scheduled.",
            labels=["tenant"],
        )
        dlq_g = GaugeMetricFamily(
            "agent_signal_dlq_size", "Events in the dead-letter list.", labels=["tenant"]
        )
        active_g = GaugeMetricFamily(
            "agent_signal_active_scopes",
            "Scopes with queued events, paused ones not counted (their events: agent_signal_backlog_paused_events).",
            labels=["tenant"],
        )
        outbox_dead_g = GaugeMetricFamily(
            "agent_signal_outbox_dead",
            "Outbound calls that failed every attempt (GET /v1/outbox/dead), kept for the outbox retention.",
            labels=["tenant"],
        )
        oldest_g = GaugeMetricFamily(
            "agent_signal_backlog_oldest_seconds",
            "How long the oldest head of a scope waiting for a drain has waited since its enqueue (0: none waits).",
            labels=["tenant"],
        )
        for tenant in sorted(waiting):
            keys = store.keys.for_tenant(tenant)
            backlog_g.add_metric([self.queue, tenant], waiting[tenant])
            paused_g.add_metric([self.queue, tenant], paused[tenant])
            runnable_g.add_metric([self.queue, tenant], waiting[tenant] - paused[tenant])
            # One walk of the tenant's scopes gives both: those with work, and those of them left stranded.
            rows = list_scopes(store, keys, limit=STUCK_SCAN_MAX)
            states = [row["state"] for row in rows]
            stuck_g.add_metric([tenant], states.count("stuck"))
            # waiting for a drain (not paused, not running): a head held by its retry's backoff, or redriven (its
            # enqueuedAt kept), reads its age since its first enqueue (docs/operations.md, Every worker down)
            ages = [row.get("headAgeMs", 0) for row in rows if row["state"] in ("waiting", "stuck")]
            oldest_g.add_metric([tenant], max(ages, default=0) / 1000)
            dlq_g.add_metric([tenant], store.dlq_size(keys))
            active_g.add_metric([tenant], sum(state != "paused" for state in states))
            outbox_dead_g.add_metric([tenant], store.index_size(keys, _outbox_dead))
        yield from (backlog_g, paused_g, runnable_g, stuck_g, dlq_g, active_g, outbox_dead_g, oldest_g)
        yield GaugeMetricFamily(
            "agent_signal_workers",
            "Worker processes with a fresh heartbeat (at most four reconcile intervals old).",
            value=live_workers(store),
        )
        safety = current_safety(store.client, store.settings)
        if safety.persistent is not None:
            yield GaugeMetricFamily(
                "agent_signal_store_persistent",
                "1 when Redis persists (appendonly or save points), else 0.",
                value=int(safety.persistent),
            )
        if safety.memory_ratio is not None:
            yield GaugeMetricFamily(
                "agent_signal_store_memory_ratio", "Redis used_memory / maxmemory.", value=safety.memory_ratio
            )


def _outbox_dead(bucket: BucketKeys) -> str:
    return bucket.outbox_dead


def state_exposition(store: EventStore, queue: str) -> bytes:
    """Prometheus text of the engine-wide state gauges (see module docstring)."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_StateCollector(store, queue))
    return bytes(generate_latest(registry))
