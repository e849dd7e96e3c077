"""The scope lease's scripts: ACQUIRE, RENEW (any lock), RENEW_SCOPE (a drain's lease), HAND_OFF,
RELEASE."""

from __future__ import annotations

from dataclasses import dataclass

from worker.store.calls.layout import ScriptCall, arg, key

__all__ = ["Acquire", "HandOff", "Release", "Renew", "RenewScope", "UnconfirmedGrant"]


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
    lane_holders: str = key()
    token: str = arg()
    ttl_ms: int = arg()
    ev_prefix: str = arg()
    now_ms: int = arg()
    scope_ref: str = arg()
    window_s: int = arg()  # a head found cancelled is kept this long, as a cancelled event is


@dataclass(frozen=True, slots=True)
class Renew(ScriptCall):
    SCRIPT = "renew"
    lease: str = key()
    token: str = arg()
    ttl_ms: int = arg()


@dataclass(frozen=True, slots=True)
class RenewScope(ScriptCall):
    """A drain's scope lease kept: extended while ours, taken again when it ran out, the scope's fencing number is
    still ours (nobody was granted it since) and its head is an event we began (we did not release it)."""

    SCRIPT = "renew_scope"
    lease: str = key()
    fence_key: str = key()
    inbox: str = key()
    token: str = arg()
    ttl_ms: int = arg()
    fence: int = arg()
    ev_prefix: str = arg()


@dataclass(frozen=True, slots=True)
class HandOff(ScriptCall):
    """A drain's hand-off: its lease released (token-checked), and with ``marker_px`` (0: none) the scope's drain
    marker set to cover a wait, while the lease was still ours."""

    SCRIPT = "hand_off"
    lease: str = key()
    sched: str = key()
    token: str = arg()
    marker_px: int = arg()
    ttl_ms: int = arg()  # the marker's value: the writer's schedule TTL, the wait not counted


@dataclass(frozen=True, slots=True)
class Release(ScriptCall):
    SCRIPT = "release"
    lease: str = key()
    token: str = arg()


@dataclass(frozen=True, slots=True)
class UnconfirmedGrant(ScriptCall):
    """A grant its replicas did not confirm (``AGENT_SIGNAL_WAIT_REPLICAS``), given back: its lease released
    (token-checked) and the attempt it began on its head uncounted while nobody was granted the scope since."""

    SCRIPT = "unconfirmed_grant"
    lease: str = key()
    event: str = key()
    token: str = arg()
    fence: int = arg()
    attempts: int = arg()
    previous_state: str = arg()
