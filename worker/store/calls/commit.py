"""The commit: a run's COMMIT (its events, their lanes, the next scope's pop), APPLY and PEEK_FRESH."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from worker.core.record import record
from worker.store.calls.layout import Layout, ScriptCall, arg, group, key

__all__ = ["Apply", "Commit", "CommittedEvent", "Lane", "PeekFresh", "PopNext"]


@record
class Lane(Layout):
    """An action a run applied: its idempotency lane, its stored result and its staged writes; ``lane_alias``: the
    lane's key in its other form ('' for none: worker/core/idempotency.py), which COMMIT finds taken as the lane."""

    LUA = "LANE"
    lane: str = key()
    result_json: bytes | str = arg()
    lane_effects_json: str = arg()
    lane_alias: str = arg()


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
    kept_lanes_json: str = arg()  # retry or dead: the lanes its run found or marked ('' for none)
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
    lane_holders: str = key()
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
    peek_skip: int = arg()
    pop_next: int = arg()
    # this scope's lease, set again before a next head is taken; the popped scope's lease too
    lease_ttl_ms: int = arg()
    pop: Sequence[PopNext] = group()
    events: Sequence[CommittedEvent] = group()


@dataclass(frozen=True, slots=True)
class Apply(ScriptCall):
    SCRIPT = "apply"
    lane: str = key()
    fence_key: str = key()
    event: str = key()  # its hash lists the lane (kept until the event ends: worker/store/lua/apply.lua)
    lane_holders: str = key()
    fence: int = arg()
    result_json: bytes | str = arg()
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
