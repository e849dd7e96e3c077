"""Each Lua script's KEYS and ARGV, declared once: a frozen dataclass per script (the commit's, built per event,
a :func:`~worker.core.record.record`) whose fields, in order, are the script's keys (:func:`key`) and arguments
(:func:`arg`), then its repeated groups (:func:`group`: a sequence of smaller layouts, each one's keys and
arguments appended in turn). The dataclass builds the call (:meth:`Layout.keys`, :meth:`Layout.args`) and
documents the layout (field names are the Lua locals'): each script's file opens with the locals
:meth:`Layout.lua_locals` writes and reads a group's items with :meth:`Layout.group_locals`' lines (tested)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any, ClassVar

from worker.core.record import record

__all__ = [
    "Acquire",
    "Admission",
    "Apply",
    "Bucket",
    "Cancel",
    "Commit",
    "CommittedEvent",
    "Discard",
    "Enqueue",
    "EnqueuePush",
    "JournalApply",
    "Lane",
    "Layout",
    "OutboxClaim",
    "OutboxSettle",
    "PeekFresh",
    "PopAcquire",
    "PopNext",
    "ReadyPop",
    "ReadyPush",
    "Redrive",
    "Release",
    "Renew",
    "Resume",
    "RunsPage",
    "ScriptCall",
    "Slot",
    "StreamRenew",
    "StreamTake",
    "TicketForce",
    "TicketReturn",
    "TokenBuckets",
    "Touched",
    "UserBytes",
    "arg",
    "group",
    "key",
]

Arg = str | int | float | bytes


def key() -> Any:
    """A key of the script (``KEYS[i]``)."""
    return field(metadata={"lua": "key"})


def arg() -> Any:
    """An argument of the script (``ARGV[i]``)."""
    return field(metadata={"lua": "arg"})


def group() -> Any:
    """A repeated group: a sequence of layouts whose keys and arguments follow the fixed ones, item by item."""
    return field(metadata={"lua": "group"})


class Layout:
    """A script's (or a repeated group's) keys and arguments, in field order."""

    LUA: ClassVar[str] = ""  # a group's name in Lua (its strides are <LUA>_KEYS, <LUA>_ARGS)

    @classmethod
    def names(cls, kind: str) -> tuple[str, ...]:
        """The fields of ``kind`` (``key``, ``arg`` or ``group``), in order: worked out once per class, since
        every script call asks (``dataclasses.fields`` per call cost ~8% of a drained event's instructions)."""
        return _field_names(cls, kind)

    def keys(self) -> list[str]:
        out: list[str] = list(_values(self, "key"))
        for name in self.names("group"):
            for item in getattr(self, name):
                out += item.keys()
        return out

    def args(self) -> list[Arg]:
        out: list[Arg] = list(_values(self, "arg"))
        for name in self.names("group"):
            for item in getattr(self, name):
                out += item.args()
        return out

    @classmethod
    def lua_locals(cls) -> list[str]:
        """The Lua that names a script's fixed keys and arguments: ``local a, b = KEYS[1], KEYS[2]``."""
        return [
            _locals(names, table, lambda i: str(i + 1))
            for names, table in ((cls.names("key"), "KEYS"), (cls.names("arg"), "ARGV"))
            if names
        ]

    @classmethod
    def group_locals(cls, keys: str = "KEYS", args: str = "ARGV") -> list[str]:
        """The Lua that names one item's keys (from index ``k``) and arguments (from ``a``); with fixed sizes,
        the strides: ``local EVENT_KEYS, EVENT_ARGS = 2, 10``."""

        def at(base: str) -> Any:
            return lambda i: base if i == 0 else f"{base} + {i}"

        lines = [
            _locals(names, table, at(base))
            for names, table, base in ((cls.names("key"), keys, "k"), (cls.names("arg"), args, "a"))
            if names
        ]
        if not cls.names("group"):
            lines.append(
                f"local {cls.LUA}_KEYS, {cls.LUA}_ARGS = {len(cls.names('key'))}, {len(cls.names('arg'))}"
            )
        return lines


_FIELD_NAMES: dict[tuple[type, str], tuple[str, ...]] = {}


def _field_names(layout: type, kind: str) -> tuple[str, ...]:
    found = _FIELD_NAMES.get((layout, kind))
    if found is None:
        found = tuple(f.name for f in fields(layout) if f.metadata.get("lua") == kind)
        _FIELD_NAMES[(layout, kind)] = found
    return found


_GETTERS: dict[tuple[type, str], Callable[[Any], tuple[Any, ...]]] = {}


def _values(layout: Layout, kind: str) -> tuple[Any, ...]:
    """The values of ``layout``'s fields of ``kind``, in order, through one ``attrgetter`` per class and kind."""
    getter = _GETTERS.get((type(layout), kind))
    if getter is None:
        names = _field_names(type(layout), kind)
        if len(names) == 1:
            one = attrgetter(names[0])
            getter = lambda value: (one(value),)  # noqa: E731 (attrgetter of one name returns no tuple)
        elif names:
            getter = attrgetter(*names)
        else:
            getter = lambda value: ()  # noqa: E731
        _GETTERS[(type(layout), kind)] = getter
    return getter(layout)


def _locals(names: Sequence[str], table: str, index: Any) -> str:
    values = ", ".join(f"{table}[{index(i)}]" for i in range(len(names)))
    return f"local {', '.join(names)} = {values}"


class ScriptCall(Layout):
    """A call of one script (``SCRIPT``: its file, ``lua/<SCRIPT>.lua``)."""

    SCRIPT: ClassVar[str] = ""


# ---- the scope lease ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Acquire(ScriptCall):
    SCRIPT = "acquire"
    lease: str = key()
    fence_key: str = key()
    inbox: str = key()
    sched: str = key()
    scopes: str = key()
    paused: str = key()
    stats: str = key()
    runs_active: str = key()
    runs_cancelled: str = key()
    token: str = arg()
    ttl_ms: int = arg()
    ev_prefix: str = arg()
    now_ms: int = arg()
    scope_ref: str = arg()


@dataclass(frozen=True, slots=True)
class Renew(ScriptCall):
    SCRIPT = "renew"
    lease: str = key()
    token: str = arg()
    ttl_ms: int = arg()


@dataclass(frozen=True, slots=True)
class Release(ScriptCall):
    SCRIPT = "release"
    lease: str = key()
    token: str = arg()


# ---- admission -----------------------------------------------------------------------------------------------


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
    """A user the batch names: their stored bytes (the user's storage quota)."""

    LUA = "USER"
    bytes_key: str = key()


@dataclass(frozen=True, slots=True)
class Enqueue(ScriptCall):
    SCRIPT = "enqueue"
    scopes: str = key()
    stats: str = key()
    paused: str = key()
    runs_active: str = key()
    runs_types: str = key()
    retained: str = key()
    now_ms: int = arg()
    window_s: int = arg()
    sched_ttl_ms: int = arg()
    tenant: str = arg()
    max_inbox: int = arg()
    max_queued: int = arg()
    run_index_max: int = arg()
    max_events: int = arg()
    retained_slot_ms: int = arg()
    max_user_bytes: int = arg()
    user_count: int = arg()
    events: Sequence[Admission] = group()
    users: Sequence[UserBytes] = group()


@dataclass(frozen=True, slots=True)
class EnqueuePush(Enqueue):
    """ENQUEUE, then the scopes it made ready pushed on their tenant's ready list (fair share): ENQUEUE's keys and
    arguments, then these (each kind keeps its field order, so ENQUEUE's come first on both sides)."""

    SCRIPT = "enqueue_push"
    ring: str = key()
    ready: str = key()
    tickets: str = key()
    tickets_max: int = arg()
    ticket_ttl_ms: int = arg()


# ---- the commit -------------------------------------------------------------------------------------------


@record
class Lane(Layout):
    """An action a run applied: its idempotency lane, its stored result and its staged writes."""

    LUA = "LANE"
    lane: str = key()
    result_json: bytes | str = arg()
    lane_effects_json: str = arg()


@record
class CommittedEvent(Layout):
    """One event of a commit: its record and chain, its outcome, its staged writes and follow-ups (JSON lists:
    the follow-ups as their :class:`Admission` layouts, keys then arguments), and the lanes its chain ran."""

    LUA = "EVENT"
    ev: str = key()
    chain: str = key()
    lane_count: int = arg()
    event_id: str = arg()
    outcome: str = arg()
    error_text: str = arg()
    not_before: int = arg()
    chain_json: bytes | str = arg()
    chain_id: str = arg()
    go_on: str = arg()
    effects_json: str = arg()
    followups_json: str = arg()
    lanes: Sequence[Lane] = group()


@dataclass(frozen=True, slots=True)
class PopNext(Layout):
    """What COMMIT needs to pop the next ready scope and take its lease once it released its own (one Redis, one
    scope bucket: the popped scope's keys are built in Lua, as POP_ACQUIRE builds them)."""

    LUA = "POP"
    ring: str = key()
    tickets: str = key()
    ready_prefix: str = arg()
    ticket_ttl_ms: int = arg()
    key_prefix: str = arg()
    pop_token: str = arg()
    lease_ttl_ms: int = arg()


@record
class Commit(ScriptCall):
    """A run of one or more head events of a scope, committed in inbox order; with ``pop`` (one item, and
    ``pop_next`` 1), then the next ready scope popped and its lease taken when this one was released."""

    SCRIPT = "commit"
    inbox: str = key()
    fence_key: str = key()
    dlq: str = key()
    stats: str = key()
    lease: str = key()
    sched: str = key()
    scopes: str = key()
    series: str = key()
    paused: str = key()
    runs_active: str = key()
    runs_types: str = key()
    runs_dead: str = key()
    runs_cancelled: str = key()
    fence: int = arg()
    now_ms: int = arg()
    window_s: int = arg()
    sched_ttl_ms: int = arg()
    run_index_max: int = arg()
    chain_ttl_s: int = arg()
    token: str = arg()
    scope_ref: str = arg()
    ev_prefix: str = arg()
    lane_ttl_s: int = arg()
    peek_count: int = arg()
    pop_next: int = arg()
    pop: Sequence[PopNext] = group()
    events: Sequence[CommittedEvent] = group()


@dataclass(frozen=True, slots=True)
class Apply(ScriptCall):
    SCRIPT = "apply"
    lane: str = key()
    fence_key: str = key()
    fence: int = arg()
    result_json: bytes | str = arg()
    lane_ttl_s: int = arg()
    effects_json: str = arg()


@dataclass(frozen=True, slots=True)
class PeekFresh(ScriptCall):
    SCRIPT = "peek_fresh"
    inbox: str = key()
    fence_key: str = key()
    fence: int = arg()
    ev_prefix: str = arg()
    now_ms: int = arg()
    head_id: str = arg()
    count: int = arg()


# ---- operators ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Redrive(ScriptCall):
    SCRIPT = "redrive"
    ev: str = key()
    inbox: str = key()
    sched: str = key()
    scopes: str = key()
    dlq: str = key()
    stats: str = key()
    seq: str = key()
    paused: str = key()
    runs_dead: str = key()
    runs_active: str = key()
    event_id: str = arg()
    scope_ref: str = arg()
    now_ms: int = arg()
    sched_ttl_ms: int = arg()
    window_s: int = arg()
    new_body: str = arg()
    scope_key: str = arg()
    run_index_max: int = arg()


@dataclass(frozen=True, slots=True)
class Discard(ScriptCall):
    SCRIPT = "discard"
    ev: str = key()
    dlq: str = key()
    stats: str = key()
    runs_dead: str = key()
    runs_discarded: str = key()
    runs_discarded_at: str = key()
    audit: str = key()
    event_id: str = arg()
    reason: str = arg()
    now_ms: int = arg()
    window_s: int = arg()
    audit_max_len: int = arg()
    run_index_max: int = arg()


@dataclass(frozen=True, slots=True)
class Cancel(ScriptCall):
    SCRIPT = "cancel"
    ev: str = key()
    stats: str = key()
    runs_active: str = key()
    runs_cancelled: str = key()
    event_id: str = arg()
    now_ms: int = arg()
    window_s: int = arg()
    run_index_max: int = arg()


@dataclass(frozen=True, slots=True)
class Resume(ScriptCall):
    SCRIPT = "resume"
    paused: str = key()
    inbox: str = key()
    scopes: str = key()
    sched: str = key()
    scope_key: str = arg()
    scope_ref: str = arg()
    now_ms: int = arg()
    sched_ttl_ms: int = arg()


@dataclass(frozen=True, slots=True)
class RunsPage(ScriptCall):
    SCRIPT = "runs_page"
    index: str = key()
    max_score: str = arg()
    after: str = arg()
    min_score: str = arg()
    count: int = arg()


# ---- the outbox and the journal ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OutboxClaim(ScriptCall):
    SCRIPT = "outbox_claim"
    due: str = key()
    lease_ms: int = arg()


@dataclass(frozen=True, slots=True)
class OutboxSettle(ScriptCall):
    SCRIPT = "outbox_settle"
    due: str = key()
    record: str = key()
    member: str = arg()
    deadline: int = arg()
    record_json: str = arg()
    next_due: str = arg()


@dataclass(frozen=True, slots=True)
class Touched(Layout):
    """A key a journal record's commands write."""

    LUA = "TOUCHED"
    touched: str = key()


@dataclass(frozen=True, slots=True)
class JournalApply(ScriptCall):
    SCRIPT = "journal_apply"
    marker: str = key()
    marker_ttl_s: int = arg()
    commands_json: str = arg()
    keys_written: Sequence[Touched] = group()


# ---- fair share ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReadyPush(ScriptCall):
    SCRIPT = "ready_push"
    ring: str = key()
    ready: str = key()
    tickets: str = key()
    tenant: str = arg()
    scope_ref: str = arg()
    tickets_max: int = arg()
    ticket_ttl_ms: int = arg()


@dataclass(frozen=True, slots=True)
class ReadyPop(ScriptCall):
    SCRIPT = "ready_pop"
    ring: str = key()
    tickets: str = key()
    ready_prefix: str = arg()
    ticket_ttl_ms: int = arg()


@dataclass(frozen=True, slots=True)
class PopAcquire(ScriptCall):
    """READY_POP and ACQUIRE in one round trip (one Redis, one scope bucket): the scope's keys are built in Lua
    from the popped ref (worker/keys/lua_half.py), so only the fair queue's keys are declared."""

    SCRIPT = "pop_acquire"
    ring: str = key()
    tickets: str = key()
    ready_prefix: str = arg()
    ticket_ttl_ms: int = arg()
    key_prefix: str = arg()
    token: str = arg()
    ttl_ms: int = arg()
    now_ms: int = arg()


@dataclass(frozen=True, slots=True)
class TicketReturn(ScriptCall):
    SCRIPT = "ticket_return"
    tickets: str = key()
    count: int = arg()


@dataclass(frozen=True, slots=True)
class TicketForce(ScriptCall):
    SCRIPT = "ticket_force"
    tickets: str = key()
    ticket_ttl_ms: int = arg()


# ---- the door's limits ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Bucket(Layout):
    """A token bucket and its refill rate (tokens a second) and burst."""

    LUA = "BUCKET"
    bucket: str = key()
    rate: str = arg()
    burst: str = arg()


@dataclass(frozen=True, slots=True)
class TokenBuckets(ScriptCall):
    SCRIPT = "token_buckets"
    want: int = arg()
    whole: str = arg()
    buckets: Sequence[Bucket] = group()


@dataclass(frozen=True, slots=True)
class StreamTake(ScriptCall):
    SCRIPT = "stream_take"
    streams: str = key()
    member: str = arg()
    max_streams: int = arg()
    lease_ms: int = arg()


@dataclass(frozen=True, slots=True)
class Slot(Layout):
    """A stream slot a web process holds."""

    LUA = "SLOT"
    slot: str = arg()


@dataclass(frozen=True, slots=True)
class StreamRenew(ScriptCall):
    SCRIPT = "stream_renew"
    streams: str = key()
    lease_ms: int = arg()
    slots: Sequence[Slot] = group()
