"""Deterministic waits for tests that assert that something did *not* happen.

A fixed ``sleep`` before an absence assertion is a flaky test: on a slow machine the thing under test has
not had its chance yet (the test passes when it should fail), on a fast one the time is wasted. Wait on a
signal that proves the work is over instead:

* :func:`wait_final`: the event's own record (``ev:<eventId>``, field ``state``) is ``done`` or ``dead``;
  nothing more happens to an event in a final state unless someone redrives it.
* :func:`drain_marker`: a later *marker* event on the same scope is ``done``. A scope's inbox drains in
  enqueue order, one event at a time, so once the marker is done every event enqueued on that scope before
  it has reached its final state too (or was never enqueued, which is what such a test wants to show).

The marker is a ``test.timeline`` event (``tests.support.policies``): its only effect is two records in
``test:timeline`` (``seq`` = the marker's source id, and the pid of the worker process that ran it), so it
does not disturb counters or receipts that the calling test asserts on.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from redis import Redis

from tests.conftest import wait_for
from worker.keys.layout import BucketKeys

__all__ = ["FINAL_STATES", "drain_marker", "event_state", "marker_pid", "wait_final"]

FINAL_STATES = ("done", "dead")


class _Enqueued(Protocol):
    event_id: str
    status: str


class _Producer(Protocol):
    store: Any
    keys: Any

    def enqueue(self, event: Any, /) -> _Enqueued: ...


def event_state(redis: Redis, keys: BucketKeys, event_id: str) -> str | None:
    """The ``state`` field of the event's Redis record (queued, processing, done, dead), or None if absent."""
    state = redis.hget(keys.event(event_id), "state")
    return None if state is None else str(state)


def wait_final(
    redis: Redis, keys: BucketKeys, event_id: str, *, timeout_s: float = 30.0, what: str = ""
) -> str:
    """Wait until the event's record is in a final state (``done`` or ``dead``) and return that state."""

    def final() -> str | None:
        state = event_state(redis, keys, event_id)
        return state if state in FINAL_STATES else None

    return str(wait_for(final, timeout_s=timeout_s, what=what or f"event {event_id} to be done or dead"))


def drain_marker(
    producer: _Producer,
    redis: Redis,
    keys: BucketKeys,
    scope_key: str,
    source_id: str,
    *,
    timeout_s: float = 30.0,
) -> str:
    """Enqueue a marker event on ``scope_key`` and wait until it is ``done``; returns its event id.

    When this returns, everything enqueued on the scope before the marker has been drained. The marker must
    be ``done``: a dead marker means the scope itself is broken, and the caller's absence assertion would
    prove nothing, so that fails here."""
    marker = {"sourceType": "test.timeline", "sourceId": source_id, "scopeKey": scope_key}
    result = producer.enqueue({**marker, "payload": {"seq": source_id}})
    assert result.status == "accepted", f"marker {source_id} was {result.status}: pick an unused source id"
    bucket = producer.keys.for_scope(scope_key)  # with scope buckets, the marker is in its scope's bucket
    state = wait_final(redis, bucket, result.event_id, timeout_s=timeout_s, what=f"the marker {source_id}")
    assert state == "done", f"the marker {source_id} on {scope_key} ended {state}"
    return result.event_id


def marker_pid(redis: Redis, keys: BucketKeys, source_id: str) -> int:
    """The pid of the worker process that ran the marker ``source_id`` (from its ``test:timeline`` records)."""
    for raw in redis.lrange(f"{keys.bucket_prefix}test:timeline", 0, -1):
        record = json.loads(raw)
        if record.get("seq") == source_id and record.get("phase") == "end":
            return int(record["pid"])
    raise AssertionError(f"the marker {source_id} left no timeline record")


def outbox_settled(store: Any, tenant: str = "default") -> bool:
    """True when no outbox record of ``tenant`` waits (in any scope bucket): every journaled write and
    follow-up (worker/store/journal.py) has been delivered."""
    every = store.keys.for_tenant(tenant).every_bucket()
    return not any(store.client.zcard(k.outbox_due) or store.client.zcard(k.journal_due) for k in every)


def relay_for(pipeline: Any, settings: Any) -> Any:
    """An outbox relay for an in-process pipeline: the loaded plugins' deliverers over its own runtime (so a
    dependency a test replaced in ``pipeline.deps`` is the one the deliverer uses)."""
    from worker.outbox.relay import OutboxRelay
    from worker.runtime.assembly import load_plugins
    from worker.runtime.plugin_model import PluginRuntime

    runtime = PluginRuntime(
        settings, pipeline.store.client, pipeline.store.keys, pipeline.emitter, deps=pipeline.deps
    )
    deliverers = {
        kind: build(runtime) for plugin in load_plugins(settings) for kind, build in plugin.deliverers.items()
    }
    from worker.outbox.journal_delivery import journal_deliverers

    deliverers |= journal_deliverers(pipeline.store, pipeline.emitter, settings.outbox_retention_s)
    return OutboxRelay(
        pipeline.store,
        deliverers,
        max_attempts=settings.outbox_max_attempts,
        base_ms=settings.outbox_retry_base_ms,
        cap_ms=settings.outbox_retry_cap_ms,
    )
