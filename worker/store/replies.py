"""The scripts' reply codes, one :class:`~enum.IntEnum` each: the Python side compares members, and the Lua side
names the same members (``CommitCode.STALE_FENCE``), each written as its number when the loader joins a script
(:func:`inline_codes`), so the two sides cannot drift and a name the enum lacks fails at load, not as a nil at
run time. Numbers, not tables: a table per enum was built on every call of every script (issue 29)."""

from __future__ import annotations

import re
from enum import IntEnum

__all__ = [
    "ENUMS",
    "ApplyCode",
    "CancelCode",
    "CommitCode",
    "HeadCode",
    "ReleaseCode",
    "RenewCode",
    "UnknownCode",
    "inline_codes",
]


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


class RenewCode(IntEnum):
    """RENEW_SCOPE of a drain's lease (worker/store/lua/renew_scope.lua)."""

    RENEWED = 1  # ours, extended; or ran out under a head we began, and taken again
    TAKEN_BY_ANOTHER = 0  # another holder has it, or the scope was granted since
    GONE = 2  # no lease and no head of ours: our own release, or it ran out with nothing begun


ENUMS: tuple[type[IntEnum], ...] = (ApplyCode, CancelCode, CommitCode, HeadCode, ReleaseCode, RenewCode)


_NAMED = re.compile(r"\b(" + "|".join(e.__name__ for e in ENUMS) + r")\b(\.([A-Za-z_][A-Za-z0-9_]*))?")
_VALUES = {e.__name__: {m.name: int(m.value) for m in e} for e in ENUMS}


class UnknownCode(ValueError):
    """Lua that names a reply code the enum lacks, or an enum itself (only its members are written)."""


def inline_codes(lua: str, where: str = "script") -> str:
    """``lua`` with each ``Enum.MEMBER`` of :data:`ENUMS` written as its number in parentheses
    (``CommitCode.ENDED`` -> ``(2)``, ``CommitCode.REFUSED`` -> ``(-3)``: a bare ``-3`` after a minus would open a
    comment, a bare ``2`` before ``..`` is a malformed number). Comments are rewritten too (harmless); a bare enum
    name anywhere, even in a comment, is refused, naming ``where``."""

    def number(found: re.Match[str]) -> str:
        enum, member = found.group(1), found.group(3)
        value = _VALUES[enum].get(member or "")
        if value is None:
            raise UnknownCode(f"{where}: {found.group(0)!r} is not a member of {enum} (write {enum}.MEMBER)")
        return f"({value})"

    return _NAMED.sub(number, lua)
