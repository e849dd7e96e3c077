"""Admission: an event's record and indexes (a layout ENQUEUE and COMMIT share), ENQUEUE and ENQUEUE_PUSH."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from worker.core.record import record
from worker.store.calls.layout import Layout, ScriptCall, arg, group, key

__all__ = ["Admission", "Enqueue", "EnqueuePush", "Guard", "UserBytes", "UserEvents"]


@record
class Admission(Layout):
    """One event as ENQUEUE and COMMIT (its follow-ups) admit it (a record: the door builds one per event)."""

    LUA = "ADMISSION"
    ev: str = key()
    inbox: str = key()
    sched: str = key()
    seq: str = key()
    user_index: str = key()
    scope_users: str = key()
    runs_type: str = key()
    runs_scope: str = key()
    by_source: str = key()
    event_id: str = arg()
    scope_ref: str = arg()
    body: str = arg()
    user_id: str = arg()
    source_type: str = arg()
    source_id: str = arg()
    source_member: str = arg()


@dataclass(frozen=True, slots=True)
class UserBytes(Layout):
    """A stored-bytes count the batch is checked against (a user it names, then the tenant's:
    worker/store/quotas.py ``stored_bytes_checks``) and its quota."""

    LUA = "USER"
    bytes_key: str = key()
    max_bytes: int = arg()


@dataclass(frozen=True, slots=True)
class UserEvents(Layout):
    """A user the batch names and the count of its retained events in the bucket (worker/store/quotas.py)."""

    LUA = "USER_EVENTS"
    events_key: str = key()
    user_id: str = arg()


@dataclass(frozen=True, slots=True)
class Guard(Layout):
    """An event of the batch admitted only while ``origin`` (another event's record, in the same scope bucket) is
    no tombstone: the batch is refused ``ERASED <position>`` (numbered from 1) before any write when it is."""

    LUA = "GUARD"
    origin: str = key()
    position: int = arg()


@dataclass(frozen=True, slots=True)
class Enqueue(ScriptCall):
    SCRIPT = "enqueue"
    scopes: str = key()
    stats: str = key()
    paused: str = key()
    runs_active: str = key()
    runs_types: str = key()
    retained: str = key()
    dlq: str = key()  # its dead events past the window count toward the retained quota too (quotas.py)
    now_ms: int = arg()
    window_s: int = arg()
    sched_ttl_ms: int = arg()
    tenant: str = arg()
    max_inbox: int = arg()
    max_queued: int = arg()
    run_index_max: int = arg()
    max_events: int = arg()
    retained_slot_ms: int = arg()
    user_count: int = arg()
    retained_unit_bytes: int = arg()  # an event counts one per started unit of its stored form (quotas.py)
    max_user_events: int = arg()  # a user's share of the retained events, checked when above 0
    user_events_count: int = arg()
    guard_count: int = arg()
    events: Sequence[Admission] = group()
    user_events: Sequence[UserEvents] = group()
    users: Sequence[UserBytes] = group()
    guards: Sequence[Guard] = group()  # last: the script finds them from the end


@dataclass(frozen=True, slots=True)
class EnqueuePush(Enqueue):
    """ENQUEUE, then the scopes it made ready pushed on their tenant's ready list (fair share): ENQUEUE's keys and
    arguments, then these (each kind keeps its field order, so ENQUEUE's come first on both sides)."""

    SCRIPT = "enqueue_push"
    ring: str = key()
    ready: str = key()
    tickets: str = key()
    drain_queue: str = key()  # the broker's list the script pushes drain_next messages on (if it has one)
    tickets_max: int = arg()
    ticket_ttl_ms: int = arg()
    # the message with DRAIN_MARK for its id (worker/runtime/drain_message.py); '': the caller sends them
    drain_message: str = arg()
    drain_id: str = arg()  # this call's: its n-th message's id is ``<drain_id>-<n>``
    # The lease at enqueue (enqueue_push.lua): POP_ACQUIRE's arguments for the message's first pop, done here
    # when nothing else is ready; grant_ttl_ms 0: never (Settings.lease_at_enqueue and where it applies).
    ready_prefix: str = arg()
    key_prefix: str = arg()
    grant_token: str = arg()
    grant_ttl_ms: int = arg()
