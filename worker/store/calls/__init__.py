"""Each Lua script's KEYS and ARGV, declared once: a frozen dataclass per script (the commit's, built per event,
a :func:`~worker.core.record.record`) whose fields, in order, are the script's keys (:func:`key`) and arguments
(:func:`arg`), then its repeated groups (:func:`group`: a sequence of smaller layouts, each one's keys and
arguments appended in turn). The dataclass builds the call (:meth:`Layout.keys`, :meth:`Layout.args`) and
documents the layout (field names are the Lua locals'): each script's file opens with the locals
:meth:`Layout.lua_locals` writes and reads a group's items with :meth:`Layout.group_locals`' lines (tested)."""

from __future__ import annotations

from worker.store.calls.admission import Admission, Enqueue, EnqueuePush, Guard, UserBytes, UserEvents
from worker.store.calls.commit import Apply, Commit, CommittedEvent, Lane, PeekFresh, PopNext
from worker.store.calls.door import Bucket, Slot, StreamRenew, StreamTake, TokenBuckets
from worker.store.calls.erasure import (
    ErasedEvent,
    ErasedLane,
    ErasedRecord,
    EraseHold,
    EraseScope,
    ForgetUserBytes,
    ForgottenSession,
)
from worker.store.calls.fair import PopAcquire, ReadyPop, ReadyPush, TicketForce, TicketReturn
from worker.store.calls.layout import Layout, ScriptCall, arg, group, key
from worker.store.calls.lease import Acquire, HandOff, Release, Renew, RenewScope, UnconfirmedGrant
from worker.store.calls.operators import (
    Cancel,
    Discard,
    Redrive,
    ReindexLate,
    Resume,
    RunsPage,
    ScopeProbe,
    ScopeStates,
)
from worker.store.calls.outbox import (
    JournalApply,
    JournalSettle,
    OutboxClaim,
    OutboxFail,
    OutboxSettle,
    Touched,
)

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
    "EraseHold",
    "EraseScope",
    "ErasedEvent",
    "ErasedLane",
    "ErasedRecord",
    "ForgetUserBytes",
    "ForgottenSession",
    "Guard",
    "HandOff",
    "JournalApply",
    "JournalSettle",
    "Lane",
    "Layout",
    "OutboxClaim",
    "OutboxFail",
    "OutboxSettle",
    "PeekFresh",
    "PopAcquire",
    "PopNext",
    "ReadyPop",
    "ReadyPush",
    "Redrive",
    "ReindexLate",
    "Release",
    "Renew",
    "RenewScope",
    "Resume",
    "RunsPage",
    "ScopeProbe",
    "ScopeStates",
    "ScriptCall",
    "Slot",
    "StreamRenew",
    "StreamTake",
    "TicketForce",
    "TicketReturn",
    "TokenBuckets",
    "Touched",
    "UnconfirmedGrant",
    "UserBytes",
    "UserEvents",
    "arg",
    "group",
    "key",
]
