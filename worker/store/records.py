"""What the event store takes and answers: prepared events, commits and their replies, taken heads.

Plain records (no I/O); :mod:`worker.store.events` re-exports them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from worker.chain.context import EffectBuffer
from worker.documents.event_body import full_body

__all__ = [
    "Begun",
    "Commit",
    "CommitReply",
    "EnqueueOutcome",
    "Head",
    "OnStored",
    "PreparedEvent",
    "staged_error",
    "to_str",
]


def to_str(value: Any) -> str:
    """The clients are built with decode_responses=True; this narrows redis-py's bytes|str for mypy."""
    return value if isinstance(value, str) else value.decode("utf-8")


@dataclass(frozen=True, slots=True)
class PreparedEvent:
    """A validated event ready to store: its id, scope and canonical JSON (the worker's Source)."""

    event_id: str
    scope_key: str
    source_id: str
    body: str
    source_type: str = ""
    user_id: str | None = None
    tenant: str = "default"


@dataclass(frozen=True, slots=True)
class EnqueueOutcome:
    event_id: str
    source_id: str
    scope_key: str
    status: Literal["accepted", "duplicate"]
    schedule: bool


OnStored = Callable[[list[EnqueueOutcome], int], None]
"""With scope buckets, told what a batch stored before one bucket's script failed (outcomes, drain tickets)."""


@dataclass(frozen=True, slots=True)
class Commit:
    """One event's outcome for the fenced COMMIT script. Only ``done`` applies ``effects`` (the chain's staged
    source/signal writes) and admits ``followups`` (the events its handlers emitted)."""

    scope_key: str
    fence: int
    token: str
    event_id: str
    outcome: Literal["done", "dead", "retry", "cancelled"]
    error: str = ""
    not_before_ms: int = 0
    chain_id: str = ""
    chain_json: bytes = b""  # the chain's stored form as compact JSON (worker/documents/chain_storage.py)
    source_id: str = ""  # the hash keeps chainId only when it is not the default chain:<sourceId>
    effects: EffectBuffer = field(default_factory=EffectBuffer)
    followups: Sequence[PreparedEvent] = ()


@dataclass(frozen=True, slots=True)
class CommitReply:
    """1 committed | -1 stale fence | -2 the head is another event | -3 a staged write was refused; scopes whose
    drain must be published (follow-ups that found none scheduled); the outcome committed (``cancelled`` when a
    cancel was requested while the event ran); the next head when the commit went on."""

    code: int
    publish: list[str] = field(default_factory=list)
    head: Head | None = None
    outcome: str = ""
    error: str = ""  # code -3: which staged write was refused or failed, and why
    latency_ms: int | None = None  # done: enqueue to done, by Redis's clock at admission and commit


@dataclass(frozen=True, slots=True)
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

    def source_json(self, scope_key: str) -> str:
        """The whole Source JSON: the stored body with the identity its hash holds."""
        return full_body(
            self.body,
            event_id=self.event_id,
            scope_key=scope_key,
            source_type=self.source_type,
            source_id=self.source_id,
        )


@dataclass(frozen=True, slots=True)
class Head:
    """What the scripts' ``take_head`` found: 0 inbox empty (scope released), 3 head waits, 1 head taken."""

    code: int
    begun: Begun | None = None
    not_before_ms: int = 0
    behind: int = -1  # events queued behind the head when ACQUIRE took it (-1: not known)

    @classmethod
    def parse(cls, reply: Sequence[Any]) -> Head:
        code = int(reply[0])
        if code == 1:
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
                ),
            )
        if code == 3:
            return cls(code, not_before_ms=int(float(to_str(reply[2]))))
        return cls(code)


def staged_error(reply: Sequence[Any]) -> str:
    return f"staged write #{int(reply[1])} was not applied: {to_str(reply[2])}"
