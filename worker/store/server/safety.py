"""Is the Redis under us safe to keep events in? Checked at boot (worker and web), on ``/readyz`` and ``/metrics``.

* **Eviction.** Any ``maxmemory-policy`` but ``noeviction`` (``volatile-*`` included: events, dedupe records
  and idempotency marks carry TTLs) lets a full Redis delete keys: events vanish without a trace. The process
  refuses to start, naming the policy and the fix, unless ``AGENT_SIGNAL_ALLOW_EVICTING_REDIS=true``; then it
  logs an ERROR on every boot and ``/readyz`` shows it.
* **Persistence.** ``appendonly no`` and no ``save`` points: a Redis restart forgets every event. In
  production this is a WARNING at boot, a ``persistence`` entry on ``/readyz`` (still 200) and the gauge
  ``agent_signal_store_persistent 0``.
* **Memory.** ``used_memory / maxmemory`` at or above ``AGENT_SIGNAL_REDIS_MEMORY_WARN_RATIO`` shows as a
  ``memory`` entry on ``/readyz`` (still 200); ``agent_signal_store_memory_ratio`` is always exported when a
  ``maxmemory`` is set. At 100% a ``noeviction`` Redis refuses writes: the door answers 503, workers back off
  until there is room (worker/store/server/full.py), and the entry reads ``full: …``.
* **Open slots** (Redis Cluster): a slot MIGRATING/IMPORTING refuses its tenant (503) while its keys are split.
  A ``cluster`` entry on ``/readyz`` names it (still 200): ``moving`` while its keys keep moving, ``stalled``
  once the move has stood still for ``OPEN_SLOT_STALL_S`` (left half-done: ``redis-cli --cluster fix``). See
  worker/store/server/open_slots.py.
* **CONFIG disabled** (renamed on managed Redis): said once in the log; eviction and persistence are skipped,
  never refused. The memory ratio then comes from ``INFO memory``.

:func:`assess` is the decision (pure); :func:`read_store_config` the round trip; :func:`check_at_boot` both,
plus the log lines and the refusal. :func:`describe_store_error` words a store failure for the door and
:func:`note_store_failure` logs and counts one (the ``storeUnavailable`` field of the stats hash).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

from redis import Redis
from redis.exceptions import (
    ClusterError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from worker.core.replication import NotReplicated
from worker.settings import Settings, SettingsError
from worker.store.server.client import PoolExhausted, SlotMoving
from worker.store.server.open_slots import OpenSlot, read_open_slots
from worker.telemetry.log_privacy import describe_error
from worker.telemetry.process_metrics import process_metrics

__all__ = [
    "StoreConfig",
    "StoreSafety",
    "UnsafeStore",
    "assess",
    "check_at_boot",
    "current_safety",
    "describe_store_error",
    "note_store_failure",
    "read_store_config",
    "slot_moving",
    "store_error_reason",
    "store_refused",
]

log = logging.getLogger(__name__)

EVICTION_FIX = (
    "set `maxmemory-policy noeviction` (redis.conf, or CONFIG SET maxmemory-policy noeviction), "
    "or set AGENT_SIGNAL_ALLOW_EVICTING_REDIS=true to accept that a full Redis deletes events"
)
NO_PERSISTENCE = "none: a Redis restart forgets every event"
VIEW_REFRESH_S = 10.0
OPEN_SLOT_STALL_S = (
    30.0  # a slot open this long with no key moved is a move left half-done, not one under way
)


class UnsafeStore(SettingsError):
    """The Redis configuration would lose events (an evicting policy); the message names it and the fix."""


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """What Redis says about itself. ``policy``, ``appendonly`` and ``save`` are None when CONFIG is disabled."""

    policy: str | None
    appendonly: bool | None
    save: str | None
    maxmemory: int
    used_memory: int
    open_slots: tuple[OpenSlot, ...] = ()  # a Redis Cluster's slots left MIGRATING/IMPORTING

    @property
    def persistent(self) -> bool | None:
        if self.appendonly is None or self.save is None:
            return None
        return self.appendonly or bool(self.save.strip())

    @property
    def memory_ratio(self) -> float | None:
        return self.used_memory / self.maxmemory if self.maxmemory > 0 else None


@dataclass(frozen=True, slots=True)
class StoreSafety:
    """The verdict: a refusal (or None), log lines, ``/readyz`` entries and the gauges' values."""

    refusal: str | None = None
    errors: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    checks: dict[str, str] = field(default_factory=dict)
    persistent: bool | None = None
    memory_ratio: float | None = None


def read_store_config(client: Redis) -> StoreConfig:
    """``CONFIG GET`` the four settings and ``INFO memory``, in one round trip. A disabled (renamed or
    forbidden) CONFIG gives None fields; a connection error is raised. On a Redis Cluster the client's view is
    refreshed first (a master added since it loaded would be missed), every primary is read and the least
    safe answer wins (an evicting node, a node without persistence, the fullest node), and open slots are
    listed."""
    cluster: Any = client
    if getattr(cluster, "get_primaries", None) is None:
        return _read_node(client)
    _refresh_view(cluster)
    primaries = cluster.get_primaries()
    config = _least_safe([_read_node(cluster.get_redis_connection(node)) for node in primaries])
    return replace(config, open_slots=read_open_slots(cluster, primaries))


_refreshed: dict[int, float] = {}  # cluster client id -> when its view was last refreshed here (monotonic)


def _refresh_view(cluster: Any) -> None:
    """Load the cluster's view again, at most every :data:`VIEW_REFRESH_S` per client (every replica's probes read
    ``/readyz`` every few seconds: a review counted a ``CLUSTER SLOTS`` per probe)."""
    now = time.monotonic()
    if now - _refreshed.get(id(cluster), float("-inf")) >= VIEW_REFRESH_S:
        _refreshed[id(cluster)] = now
        cluster.nodes_manager.initialize()


def _least_safe(configs: list[StoreConfig]) -> StoreConfig:
    policies = [c.policy for c in configs]
    evicting = next((p for p in policies if p not in (None, "noeviction")), None)
    fullest = max(configs, key=lambda c: c.used_memory / c.maxmemory if c.maxmemory else 0.0)
    known = [c for c in configs if c.appendonly is not None]
    return StoreConfig(
        policy=evicting or (None if None in policies else "noeviction"),
        appendonly=None if len(known) < len(configs) else all(c.appendonly for c in known),
        save=None if any(c.save is None for c in configs) else min((c.save or "" for c in configs), key=len),
        maxmemory=fullest.maxmemory,
        used_memory=fullest.used_memory,
    )


def _read_node(client: Redis) -> StoreConfig:
    pipe = client.pipeline(transaction=False)
    for name in ("maxmemory-policy", "appendonly", "save", "maxmemory"):
        pipe.config_get(name)
    pipe.info("memory")
    *configs, memory = pipe.execute(raise_on_error=False)
    if isinstance(memory, Exception):
        raise memory
    used = int(memory.get("used_memory", 0))
    failed = next((r for r in configs if isinstance(r, Exception)), None)
    if failed is not None:
        if not isinstance(failed, ResponseError):
            raise failed
        return StoreConfig(None, None, None, int(memory.get("maxmemory", 0)), used)
    policy, appendonly, save, maxmemory = (dict(r) for r in configs)
    return StoreConfig(
        policy=str(policy.get("maxmemory-policy", "noeviction")),
        appendonly=str(appendonly.get("appendonly", "no")) == "yes",
        save=str(save.get("save", "")),
        maxmemory=int(maxmemory.get("maxmemory", 0) or 0),
        used_memory=used,
    )


def assess(config: StoreConfig, settings: Settings) -> StoreSafety:
    """Decide what ``config`` means under ``settings`` (env, the override, the warn ratio)."""
    checks: dict[str, str] = {}
    errors: list[str] = []
    warnings: list[str] = []
    refusal = None
    policy = config.policy
    if policy is not None and policy != "noeviction":
        risk = (
            f"Redis maxmemory-policy is {policy}: when memory is full Redis deletes keys (events, inboxes, "
            "leases, dedupe records, idempotency marks) and events are lost"
        )
        if settings.allow_evicting_redis:
            errors.append(f"{risk}; accepted because AGENT_SIGNAL_ALLOW_EVICTING_REDIS=true")
            checks["eviction"] = (
                f"accepted: {policy} (AGENT_SIGNAL_ALLOW_EVICTING_REDIS=true); events may be evicted"
            )
        else:
            refusal = f"refusing to start: {risk}. Fix: {EVICTION_FIX}"
            checks["eviction"] = f"error: {policy}; {EVICTION_FIX}"
    if config.persistent is False and settings.env == "production":
        warnings.append(
            "Redis has no persistence (appendonly no, no save points): a Redis restart forgets every event; "
            "turn on appendonly yes (or save points)"
        )
        checks["persistence"] = NO_PERSISTENCE
    _assess_open_slots(config.open_slots, checks, warnings)
    ratio = config.memory_ratio
    if ratio is not None and ratio >= 1:
        checks["memory"] = (
            f"full: {ratio:.0%} of maxmemory used; the store refuses new events (503) and workers back off "
            "until there is room (agent_signal_store_full_backoffs_total)"
        )
        warnings.append(f"Redis memory {checks['memory']}")
    elif ratio is not None and ratio >= settings.redis_memory_warn_ratio:
        checks["memory"] = (
            f"high: {ratio:.0%} of maxmemory used (warn at {settings.redis_memory_warn_ratio:.0%}); "
            "at 100% the store refuses new events (503)"
        )
        warnings.append(f"Redis memory {checks['memory']}")
    return StoreSafety(refusal, tuple(errors), tuple(warnings), checks, config.persistent, ratio)


def _assess_open_slots(open_slots: tuple[OpenSlot, ...], checks: dict[str, str], warnings: list[str]) -> None:
    """A ``cluster`` entry naming every open slot, ``stalled`` once its move stood still ``OPEN_SLOT_STALL_S``.
    A warning, never a readiness failure: an open slot refuses one tenant, and every web process would report it
    at once, so a load balancer routing by ``/readyz`` would refuse every tenant."""
    entries = []
    for slot in open_slots:
        fix = f"run `redis-cli --cluster fix {slot.source}` (or finish the reshard)"
        if slot.still_s >= OPEN_SLOT_STALL_S:
            entries.append(
                f"stalled: {slot.describe()} with no key moved for {slot.still_s:.0f} s: a move left half-done; "
                f"its tenant's requests are refused (503) until you {fix}"
            )
        else:
            entries.append(
                f"moving: {slot.describe()}: its tenant's requests are refused (503) until the move ends; "
                f"if no reshard is running, {fix}"
            )
        warnings.append(f"Redis Cluster {entries[-1].split(': ', 1)[1]}")
    if entries:
        checks["cluster"] = "; ".join(sorted(entries))  # moving before stalled


def check_at_boot(client: Redis, settings: Settings, *, component: str) -> StoreSafety:
    """Read, decide and log; raise :class:`UnsafeStore` for an evicting policy that is not accepted.
    Redis unreachable at boot is logged and not refused (``/readyz`` shows it)."""
    try:
        config = read_store_config(client)
    except RedisError as exc:
        log.warning("%s: could not check the Redis configuration (%s)", component, describe_error(exc))
        return StoreSafety()
    if config.policy is None:
        log.warning(
            "%s: CONFIG is disabled on this Redis (renamed or not permitted): maxmemory-policy and persistence "
            "are not checked; make sure the policy is noeviction and persistence is on",
            component,
        )
    safety = assess(config, settings)
    if safety.refusal is not None:
        raise UnsafeStore(safety.refusal)
    for line in safety.errors:
        log.error("%s: %s", component, line)
    for line in safety.warnings:
        log.warning("%s: %s", component, line)
    return safety


def current_safety(client: Redis, settings: Settings) -> StoreSafety:
    """The live verdict for ``/readyz`` and ``/metrics`` (an empty one when Redis cannot be read)."""
    try:
        return assess(read_store_config(client), settings)
    except (RedisError, RedisClusterException):  # a slot no master serves is not a RedisError (a review: 500)
        return StoreSafety()


def store_refused(exc: RedisError) -> bool:
    """True when Redis refused the command before running it (full, read-only replica, failing snapshots):
    nothing of the write happened. False for connection errors and timeouts (it may have run)."""
    if isinstance(exc, OutOfMemoryError | ReadOnlyError):
        return True
    # "REFUSED": our own scripts' checks, made before their first write (worker/store/scripts.py).
    return isinstance(exc, ResponseError) and str(exc).startswith(("OOM", "MISCONF", "READONLY", "REFUSED"))


def store_error_reason(exc: RedisError) -> str:
    """A few words on why the store failed: ``out of memory``, ``unreachable (ConnectionError)``, …"""
    if isinstance(exc, OutOfMemoryError) or str(exc).startswith("OOM"):
        return "out of memory"
    if isinstance(exc, PoolExhausted):
        return "busy: every connection of this process to it was in use"
    if isinstance(exc, RedisConnectionError | RedisTimeoutError):
        return f"unreachable ({type(exc).__name__})"
    if slot_moving(exc):
        return "the tenant's slot is moving between Redis nodes"
    return f"{type(exc).__name__}: {str(exc)[:120]}"


def slot_moving(exc: RedisError) -> bool:
    """A Redis Cluster slot is being moved (``redis-cli --cluster reshard``, ``rebalance``) or was left half-moved:
    TRYAGAIN (a script's keys are split between the two nodes), redis-py's "TTL exhausted" after redirect upon
    redirect, or :class:`SlotMoving` (an ASK to a node the client cannot find)."""
    return isinstance(exc, TryAgainError | SlotMoving) or (
        isinstance(exc, ClusterError) and str(exc).startswith("TTL exhausted")
    )


def describe_store_error(exc: RedisError, what: str = "the batch") -> str:
    """One sentence for the client about one atomic write (a batch): why, whether any of it was stored,
    what to do."""
    reason = store_error_reason(exc)
    if store_refused(exc):
        return f"the store refused {what} ({reason}); nothing of it was stored; retry later"
    if isinstance(exc, PoolExhausted):  # nothing was sent
        return f"the store is {reason}; nothing of {what} was stored; retry later"
    if isinstance(exc, NotReplicated):
        return (
            f"the store applied {what} but not enough replicas confirmed it in time ({exc}), so a failover "
            "could lose it; retrying is safe (events are deduplicated)"
        )
    if isinstance(exc, RedisConnectionError | RedisTimeoutError):
        return (
            f"the store could not be reached ({type(exc).__name__}); {what} may not have been stored; "
            "retrying is safe (events are deduplicated)"
        )
    # A script error after its first write leaves the writes before it (Redis scripts do not roll back).
    return f"the store failed ({reason}); {what} may be partly stored; retrying is safe (events are deduplicated)"


_pending_lock = threading.Lock()
_pending = 0


def note_store_failure(client: Redis, stats_key: str, exc: RedisError, where: str) -> None:
    """Log one line and count the failure in the stats hash (``storeUnavailable``). The count is best effort:
    a full or unreachable Redis refuses it too, so it is carried over and added by the next attempt."""
    global _pending
    log.error("store unavailable: %s: %s: %s", where, type(exc).__name__, str(exc)[:200])
    process_metrics().add("agent_signal_store_unavailable_total", {"where": where.split(" ", 1)[0]})
    with _pending_lock:
        _pending += 1
        count = _pending
    if isinstance(exc, PoolExhausted):  # the same full pool would keep this thread waiting: carry it over
        return
    try:
        client.hincrby(stats_key, "storeUnavailable", count)
    except RedisError:
        return
    with _pending_lock:
        _pending -= count
