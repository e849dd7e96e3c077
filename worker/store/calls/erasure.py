"""Erasure's scripts (worker/ops/erasure.py): ERASE_HOLD takes a scope's lease for the erasure, ERASE_SCOPE erases
one user from one scope under it (RENEW and RELEASE keep and give back the lease, as a drain's); FORGET_USER_BYTES
takes the user's stored-bytes count out of the tenant's, and out of what their sessions would give back."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from worker.store.calls.layout import Layout, ScriptCall, arg, group, key

__all__ = [
    "EraseHold",
    "EraseScope",
    "ErasedEvent",
    "ErasedLane",
    "ErasedRecord",
    "ForgetUserBytes",
    "ForgottenSession",
]


@dataclass(frozen=True, slots=True)
class EraseHold(ScriptCall):
    SCRIPT = "erase_hold"
    lease: str = key()
    fence_key: str = key()
    token: str = arg()
    ttl_ms: int = arg()


@dataclass(frozen=True, slots=True)
class ErasedEvent(Layout):
    """One of the user's events in the scope: its record, its chain and its outbox index; and the chain it stored
    under its chain id before chains were kept per event (``legacy_chain``; ``chain`` again when it stored none):
    deleted by the script, so an erasure that lost the lease keeps it, and the lanes it names, for the next one."""

    LUA = "ERASED"
    ev: str = key()
    chain: str = key()
    outbox_of: str = key()
    legacy_chain: str = key()
    event_id: str = arg()


@dataclass(frozen=True, slots=True)
class ErasedLane(Layout):
    """An idempotency lane of an action of one of the user's events (its chain names the action): its key may
    hold the user's id (a receipt's lane) and its value the action's result."""

    LUA = "LANE"
    lane: str = key()


@dataclass(frozen=True, slots=True)
class ErasedRecord(Layout):
    """An outbox record of one of the user's events (it leaves the due sets with it)."""

    LUA = "RECORD"
    record: str = key()
    record_id: str = arg()


@dataclass(frozen=True, slots=True)
class EraseScope(ScriptCall):
    SCRIPT = "erase_scope"
    lease: str = key()
    scope_users: str = key()
    inbox: str = key()
    sched: str = key()
    seq: str = key()
    fence_key: str = key()
    runs_scope: str = key()
    scopes: str = key()
    paused: str = key()
    stats: str = key()
    dlq: str = key()
    runs_active: str = key()
    runs_dead: str = key()
    outbox_due: str = key()
    journal_due: str = key()
    outbox_dead: str = key()
    lane_holders: str = key()
    token: str = arg()
    user_id: str = arg()
    scope_key: str = arg()
    scope_ref: str = arg()
    ev_prefix: str = arg()
    now_ms: int = arg()
    window_s: int = arg()
    may_drop: int = arg()  # 1: no session of the scope names another user
    event_count: int = arg()
    last: int = arg()  # 1: the scope's last chunk, which scans the inbox and decides whole or shared
    lane_count: int = arg()
    events: Sequence[ErasedEvent] = group()
    lanes: Sequence[ErasedLane] = group()
    records: Sequence[ErasedRecord] = group()


@dataclass(frozen=True, slots=True)
class ForgottenSession(Layout):
    """One of the user's sessions (their session index names it): its context's bookkeeping (ctxmeta, whose
    ``countedFor`` may name the user's count) and its pending D-Mail (whose ``countedIn`` may)."""

    LUA = "SESSION"
    meta: str = key()
    dmail: str = key()


@dataclass(frozen=True, slots=True)
class ForgetUserBytes(ScriptCall):
    SCRIPT = "forget_user_bytes"
    user_bytes: str = key()
    tenant_bytes: str = key()
    sessions: Sequence[ForgottenSession] = group()
