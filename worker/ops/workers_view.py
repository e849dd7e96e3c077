"""The workers an operator sees: heartbeat, concurrency and the drains each is running now.

Each worker's main process writes its heartbeat (``workers``: node -> ms) and, once ready, what it runs with
(``worker-info``: node -> JSON ``{"concurrency", "pid", "startedAt"}``). A drain's lease token starts with the
node name of the worker holding it (``worker/drain/lease.py``), so the in-flight drains of a worker are the leases of
the tenant's active scopes that name it (at most ``MAX_SCOPES`` looked at per call). One rule says whether a worker
is alive (:func:`is_alive`): the console's rows, the ``agent_signal_workers`` gauge and ``agent-signal probe
worker``'s default all count a heartbeat while it is at most :data:`FRESH_BEATS` reconcile intervals old."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from worker.core.clock import now_ms
from worker.keys.layout import HOLDER_SEPARATOR, EngineKeys, Keys
from worker.settings import Settings
from worker.store.events import EventStore

__all__ = [
    "FORGET_SILENT_AFTER_MS",
    "FRESH_BEATS",
    "MAX_SCOPES",
    "forget_silent_workers",
    "is_alive",
    "workers_seen",
]

MAX_SCOPES = 1000
FORGET_SILENT_AFTER_MS = (
    3_600_000  # an hour without a beat: a worker killed without its shutdown hook (SIGKILL)
)
# a worker's heartbeat (written every reconcile interval) counts while at most this many intervals old
FRESH_BEATS = 4


def is_alive(beat_ms: Any, now: int, settings: Settings) -> bool:
    """Whether a heartbeat read from ``workers`` is fresh: at most :data:`FRESH_BEATS` reconcile intervals before
    ``now`` (a beat a moment ahead of it counts; one that is no number does not)."""
    return now - _ms(beat_ms) <= FRESH_BEATS * settings.reconcile_interval_s * 1000


def _text(value: Any) -> str:
    return value if isinstance(value, str) else bytes(value).decode("utf-8")


def workers_seen(store: EventStore, keys: Keys) -> list[dict[str, Any]]:
    """``[{"name", "lastSeenAt", "alive", "concurrency"?, "inFlight"}]`` sorted by name; ``inFlight`` counts the
    scopes of ``keys``' tenant each holds, ``alive`` is :func:`is_alive` on the server's clock."""
    client = store.client
    beats = {_text(k): _ms(v) for k, v in client.hgetall(keys.workers).items()}
    info = {_text(k): _json(v) for k, v in client.hgetall(keys.worker_info).items()}
    scopes = store.active_scopes(keys)[:MAX_SCOPES]
    pipe = client.pipeline(transaction=False)
    for scope in scopes:
        pipe.get(keys.lease(scope))
    holders = Counter(
        _text(token).rpartition(HOLDER_SEPARATOR)[0] for token in (pipe.execute() if scopes else []) if token
    )
    out = []
    now = now_ms()
    for name, at in sorted(beats.items()):
        row: dict[str, Any] = {
            "name": name,
            "lastSeenAt": at,
            "alive": is_alive(at, now, store.settings),
            "inFlight": holders.get(name, 0),
        }
        concurrency = info.get(name, {}).get("concurrency")
        if isinstance(concurrency, int):
            row["concurrency"] = concurrency
        out.append(row)
    return out


def forget_silent_workers(store: EventStore, keys: EngineKeys, now_ms: int) -> list[str]:
    """Drop the workers whose last beat is older than :data:`FORGET_SILENT_AFTER_MS` from ``workers`` and
    ``worker-info`` (and an info entry with no beat, written longer ago than that), and name them: a worker that ends cleanly removes its own entries, one killed (SIGKILL, a
    node lost) stayed listed for good. A live worker cut off that long (a partition) is listed again by its
    next beat, without its concurrency until it restarts (its info is written once, when it is ready). A beat
    that is no number counts as silent. Run by the one sweeper of an interval (worker/runtime/app.py)."""
    client = store.client
    beats = {_text(name): at for name, at in client.hgetall(keys.workers).items()}
    silent = [name for name, at in beats.items() if now_ms - _ms(at) > FORGET_SILENT_AFTER_MS]
    # info with no beat, written over an hour ago: a release before 2026-12-07 removed only the beat on a clean
    # shutdown (an upgrade walk found them). One written since its worker last beat is its start: kept.
    orphans = [
        name
        for name, raw in ((_text(n), v) for n, v in client.hgetall(keys.worker_info).items())
        if name not in beats and now_ms - _ms(_json(raw).get("startedAt")) > FORGET_SILENT_AFTER_MS
    ]
    if silent or orphans:
        pipe = client.pipeline(transaction=False)
        if silent:
            pipe.hdel(keys.workers, *silent)
        pipe.hdel(keys.worker_info, *silent, *orphans)
        pipe.execute()
    return silent + orphans


def _ms(raw: Any) -> int:
    """A beat's time (ms), 0 (long ago) for a value that is no number."""
    try:
        return int(raw)
    except (TypeError, ValueError):
        return 0


def _json(raw: Any) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}
