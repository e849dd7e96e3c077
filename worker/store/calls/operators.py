"""The operators' scripts: redrive, discard, cancel, resume, the runs explorer's page and the scope listing's
reads; and what a commit leaves to a late path: an event that ended past the window indexed again (REINDEX_LATE)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from worker.store.calls.layout import Layout, ScriptCall, arg, group, key

__all__ = [
    "Cancel",
    "Discard",
    "Redrive",
    "ReindexLate",
    "Resume",
    "RunsPage",
    "ScopeProbe",
    "ScopeStates",
]


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
    lane_holders: str = key()
    event_id: str = arg()
    reason: str = arg()
    now_ms: int = arg()
    window_s: int = arg()
    audit_max_len: int = arg()
    run_index_max: int = arg()
    lane_ttl_s: int = arg()
    actor: str = arg()


@dataclass(frozen=True, slots=True)
class ReindexLate(ScriptCall):
    SCRIPT = "reindex_late"
    ev: str = key()
    runs_type: str = key()
    runs_types: str = key()
    runs_scope: str = key()
    by_source: str = key()
    user_index: str = key()
    event_id: str = arg()
    source_type: str = arg()
    source_member: str = arg()
    now_ms: int = arg()
    window_s: int = arg()
    user_id: str = arg()


@dataclass(frozen=True, slots=True)
class Cancel(ScriptCall):
    SCRIPT = "cancel"
    ev: str = key()
    stats: str = key()
    runs_active: str = key()
    runs_cancelled: str = key()
    lane_holders: str = key()
    event_id: str = arg()
    now_ms: int = arg()
    window_s: int = arg()
    run_index_max: int = arg()
    lane_ttl_s: int = arg()


@dataclass(frozen=True, slots=True)
class Resume(ScriptCall):
    SCRIPT = "resume"
    paused: str = key()
    inbox: str = key()
    scopes: str = key()
    sched: str = key()
    scope_key: str = arg()
    scope_ref: str = arg()
    sched_ttl_ms: int = arg()


@dataclass(frozen=True, slots=True)
class RunsPage(ScriptCall):
    SCRIPT = "runs_page"
    index: str = key()
    max_score: str = arg()
    after: str = arg()
    min_score: str = arg()
    count: int = arg()


@dataclass(frozen=True, slots=True)
class ScopeProbe(Layout):
    """A scope the listing reads: its inbox, its lease and its drain marker (one bucket's keys, one slot)."""

    LUA = "PROBE"
    inbox: str = key()
    lease: str = key()
    scheduled: str = key()


@dataclass(frozen=True, slots=True)
class ScopeStates(ScriptCall):
    """What ``GET /v1/scopes`` shows of each of one bucket's scopes, one round trip for a chunk of them."""

    SCRIPT = "scope_states"
    ev_prefix: str = arg()
    probes: Sequence[ScopeProbe] = group()
