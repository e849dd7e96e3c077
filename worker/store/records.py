"""What the event store takes and answers: prepared events, commits and their replies, taken heads.

Plain records (no I/O); :mod:`worker.store.events` re-exports them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from worker.chain.context import EffectBuffer
from worker.core.idempotency import LANE_FORM, lane_form_of
from worker.core.record import record
from worker.documents.event_body import full_body
from worker.store.calls import Lane
from worker.store.replies import CommitCode, HeadCode

__all__ = [
    "Begun",
    "CommitReply",
    "EnqueueOutcome",
    "EventCommit",
    "Head",
    "OnStored",
    "PreparedEvent",
    "RunReply",
    "begun_list",
    "staged_error",
    "to_str",
]


def to_str(value: Any) -> str:
    """The clients are built with decode_responses=True; this narrows redis-py's bytes|str for mypy."""
    return value if isinstance(value, str) else value.decode("utf-8")


@dataclass(frozen=True, slots=True)  # frozen at run time too: plugins' admission hooks receive it
class PreparedEvent:
    """A validated event ready to store: its id, scope and canonical JSON (the worker's Source)."""

    event_id: str
    scope_key: str
    source_id: str
    body: str
    source_type: str = ""
    user_id: str | None = None
    tenant: str = "default"
    # another event's id, in this one's scope bucket: admitted only while that one is no tombstone (the enqueue
    # script checks it, so an erasure cannot slip between an admission hook's look and the write: UnlessErased)
    unless_erased: str = ""


@record
class EnqueueOutcome:
    event_id: str
    source_id: str
    scope_key: str
    status: Literal["accepted", "duplicate"]
    schedule: bool


OnStored = Callable[[list[EnqueueOutcome], int], None]
"""With scope buckets, told what a batch stored before one bucket's script failed (outcomes, drain tickets)."""


@record
class EventCommit:
    """One event's outcome for the fenced COMMIT script. Only ``done`` applies ``effects`` (the chain's staged
    source/signal writes) and admits ``followups`` (the events its handlers emitted); ``lanes`` are the actions
    its chain ran for a run that applies them with the commit (none when they applied one by one)."""

    event_id: str
    outcome: Literal["done", "dead", "retry", "cancelled"]
    error: str = ""
    not_before_ms: int = 0
    chain_id: str = ""
    chain_json: bytes = b""  # the chain's stored form as compact JSON (worker/documents/chain_storage.py)
    source_id: str = ""  # the hash keeps chainId only when it is not the default chain:<sourceId>
    effects: EffectBuffer = field(default_factory=EffectBuffer)
    followups: Sequence[PreparedEvent] = ()
    lanes: Sequence[Lane] = ()
    # retry or dead: the lane keys its run found or marked, kept until its end (worker/store/lua/lib/kept_lanes.lua)
    kept_lanes: Sequence[str] = ()


@record
class CommitReply:
    """One event's COMMIT reply: its code; the scope refs whose drain must be published (follow-ups that found
    none scheduled); the outcome committed (``cancelled`` when a cancel was requested while the event ran); the
    next head when the commit went on; for REFUSED which staged write was refused or failed, and why."""

    code: CommitCode
    publish: list[str] = field(default_factory=list)
    head: Head | None = None
    outcome: str = ""
    error: str = ""
    latency_ms: int | None = None  # done: enqueue to done, by Redis's clock at admission and commit
    followups_accepted: int = 0  # done: its follow-ups this commit stored (the rest were duplicates)
    followups_duplicate: int = 0

    @classmethod
    def parse(cls, reply: Sequence[Any]) -> CommitReply:
        code = CommitCode(int(reply[0]))
        if code is CommitCode.REFUSED:
            return cls(code, error=staged_error(reply))
        if code is not CommitCode.COMMITTED:
            return cls(code)
        publish = [to_str(x) for x in reply[1]] if isinstance(reply[1], list) else []
        head = Head.parse(reply[6:]) if len(reply) > 6 else None
        latency_ms = int(reply[3])
        return cls(
            code,
            publish,
            head,
            to_str(reply[2]),
            latency_ms=None if latency_ms < 0 else latency_ms,
            followups_accepted=int(reply[4]),
            followups_duplicate=int(reply[5]),
        )


@record
class RunReply:
    """COMMIT's reply for a run: the run's code, each tried event's reply, the fresh events behind the new head
    (COMMITTED), and for PARTIAL the lane's failing write."""

    code: CommitCode
    replies: list[CommitReply]
    followers: list[Begun]
    error: str = ""
    # When the commit was asked to pop the next scope and released its own: [] nothing was ready (the ticket is
    # retired), [ref], or [ref, ACQUIRE's reply] (read by ScopeLease.read_popped). None: no pop was tried.
    popped: list[Any] | None = None

    @classmethod
    def parse(cls, reply: Sequence[Any]) -> RunReply:
        code = CommitCode(int(reply[0]))
        error = staged_error([code, *reply[3:5]]) if code is CommitCode.PARTIAL else ""
        popped = list(reply[3]) if code is CommitCode.COMMITTED and len(reply) > 3 else None
        return cls(code, [CommitReply.parse(r) for r in reply[1]], begun_list(reply[2]), error, popped)


@record
class Begun:
    """The head event of a scope, taken for processing. ``body`` is the stored form (worker/documents/event_body.py);
    :meth:`source_json` is the whole Source."""

    event_id: str
    body: str
    attempts: int
    previous_state: str
    last_error: str
    source_type: str = ""
    source_id: str = ""
    # the form of its actions' lane keys, its mark (worker/store/lua/lib/take_head.lua; worker/core/idempotency.py):
    # 0 for an event a worker of before typed lanes began
    lane_form: int = 0

    def source_json(self, scope_key: str) -> str:
        """The whole Source JSON: the stored body with the identity its hash holds."""
        return full_body(
            self.body,
            event_id=self.event_id,
            scope_key=scope_key,
            source_type=self.source_type,
            source_id=self.source_id,
        )


@record
class Head:
    """What taking a scope's head found (:class:`~worker.store.replies.HeadCode`): the inbox empty (the scope
    released), the head waiting for its retry time, or the head taken."""

    code: HeadCode
    begun: Begun | None = None
    not_before_ms: int = 0
    behind: int = -1  # events queued behind the head when ACQUIRE took it (-1: not known)

    @classmethod
    def parse(cls, reply: Sequence[Any], *, behind: int = -1) -> Head:
        """``reply``: take_head's; ``behind``: the events queued behind a taken head, when the caller knows."""
        code = HeadCode(int(reply[0]))
        if code is HeadCode.TAKEN:
            return cls(
                code,
                Begun(
                    event_id=to_str(reply[1]),
                    body=to_str(reply[2]),
                    attempts=int(reply[3]),
                    previous_state=to_str(reply[4]),
                    last_error=to_str(reply[5]),
                    source_type=to_str(reply[6]) if len(reply) > 7 else "",
                    source_id=to_str(reply[7]) if len(reply) > 7 else "",
                    lane_form=lane_form_of(to_str(reply[8])) if len(reply) > 8 else 0,
                ),
                behind=behind,
            )
        if code is HeadCode.WAITS:
            return cls(code, not_before_ms=int(float(to_str(reply[2]))))
        return cls(code)


def begun_list(flat: Any) -> list[Begun]:
    """PEEK_FRESH's fresh events (never delivered: their first attempt) as :class:`Begun` records; each is begun
    by the commit before it, which marks it ``typedLanes`` (a first delivery): its lanes take today's form."""
    items = [to_str(x) for x in flat] if isinstance(flat, list) else []
    return [
        Begun(items[i], items[i + 1], 1, "queued", "", items[i + 2], items[i + 3], lane_form=LANE_FORM)
        for i in range(0, len(items) - 3, 4)
    ]


def staged_error(reply: Sequence[Any]) -> str:
    """A REFUSED reply's ``{code, index, reason}`` as one readable line."""
    return f"staged write #{int(reply[1])} was not applied: {to_str(reply[2])}"
