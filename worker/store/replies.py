"""The scripts' reply codes, one :class:`~enum.IntEnum` each: the Python side compares members, and the Lua side
reads the same names from a header generated from these enums (:func:`lua_header`, prepended by the loader), so
the two sides cannot drift."""

from __future__ import annotations

from enum import IntEnum

__all__ = ["ApplyCode", "CancelCode", "CommitCode", "HeadCode", "ReleaseCode", "lua_header"]


class CommitCode(IntEnum):
    """COMMIT's code for a run of events, and for each event it tried."""

    COMMITTED = 1  # committed (for the run: every event of it)
    ENDED = 2  # the run ended before an event that is no longer the head (a retry, a release): nothing wrong
    STALE_FENCE = -1  # our fence is no longer the scope's: rejected and counted, nothing written
    NOT_HEAD = -2  # the inbox's head is another event: nothing written
    REFUSED = -3  # a staged write was refused (checked before any write) or failed: the event is still ours
    LANE_TAKEN = -4  # a lane was marked already, or its staged writes would be refused: run the event alone
    PARTIAL = -5  # a lane's staged write failed midway: commit the event dead


class HeadCode(IntEnum):
    """What taking a scope's head found (ACQUIRE, and COMMIT going on)."""

    EMPTY = 0  # the inbox is empty (the scope was released)
    TAKEN = 1  # the head was taken: its attempt started
    WAITS = 3  # the head waits for its retry time
    PAUSED = 4  # the scope is paused (Lua only: the scripts park it and answer EMPTY)


class ApplyCode(IntEnum):
    """APPLY: an action's staged writes and its idempotency mark."""

    APPLIED = 1
    ALREADY = 0  # the lane was marked already: nothing done
    STALE_FENCE = -1
    REFUSED = -3


class CancelCode(IntEnum):
    """CANCEL of one event."""

    UNKNOWN = 0
    CANCELLED = 1  # queued: cancelled now (or it was cancelled already)
    REQUESTED = 2  # running: it stops before its next action
    FINAL = 3  # done, dead, discarded or erased: nothing to cancel


class ReleaseCode(IntEnum):
    """RELEASE of a lease (and renewing it)."""

    RELEASED = 1
    HELD_BY_ANOTHER = -1


ENUMS: tuple[type[IntEnum], ...] = (ApplyCode, CancelCode, CommitCode, HeadCode, ReleaseCode)


def lua_header() -> str:
    """The enums as Lua tables (``local CommitCode = {COMMITTED = 1, …}``), one line each."""
    lines = []
    for enum in ENUMS:
        members = ", ".join(f"{m.name} = {int(m.value)}" for m in enum)
        lines.append(f"local {enum.__name__} = {{{members}}}")
    return "\n".join(lines) + "\n"
