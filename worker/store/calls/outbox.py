"""The outbox and the journal's scripts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from worker.store.calls.layout import Layout, ScriptCall, arg, group, key

__all__ = ["JournalApply", "JournalSettle", "OutboxClaim", "OutboxFail", "OutboxSettle", "Touched"]


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
    dead: str = key()
    member: str = arg()
    deadline: int = arg()
    record_json: str = arg()
    next_due: str = arg()
    dead_at: str = arg()  # '': not dead


@dataclass(frozen=True, slots=True)
class OutboxFail(ScriptCall):
    SCRIPT = "outbox_fail"
    due: str = key()
    record: str = key()
    dead: str = key()
    member: str = arg()
    record_was: str = arg()
    record_json: str = arg()
    claimed: int = arg()  # 1: a pending record, settled only under a relay's claim


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


@dataclass(frozen=True, slots=True)
class JournalSettle(ScriptCall):
    SCRIPT = "journal_settle"
    lock: str = key()
    record: str = key()
    due: str = key()
    dead: str = key()
    token: str = arg()
    member: str = arg()
    record_json: str = arg()
    done: int = arg()
    dead_at: str = arg()  # '': not dead
