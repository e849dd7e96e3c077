"""Fair share's scripts: the ready lists, POP_ACQUIRE and the drain tickets."""

from __future__ import annotations

from dataclasses import dataclass

from worker.store.calls.layout import ScriptCall, arg, key

__all__ = ["PopAcquire", "ReadyPop", "ReadyPush", "TicketForce", "TicketReturn"]


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
    window_s: int = arg()  # a head found cancelled is kept this long, as a cancelled event is


@dataclass(frozen=True, slots=True)
class TicketReturn(ScriptCall):
    SCRIPT = "ticket_return"
    tickets: str = key()
    count: int = arg()


@dataclass(frozen=True, slots=True)
class TicketForce(ScriptCall):
    """Enough tickets that ``wanted`` are out (at most ``tickets_max``), and at least ``at_least`` taken, past the
    cap if need be: the sweep's messages."""

    SCRIPT = "ticket_force"
    tickets: str = key()
    ticket_ttl_ms: int = arg()
    wanted: int = arg()
    tickets_max: int = arg()
    at_least: int = arg()
