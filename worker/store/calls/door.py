"""The door's limits: token buckets and the receipt streams' slots."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from worker.store.calls.layout import Layout, ScriptCall, arg, group, key

__all__ = ["Bucket", "Slot", "StreamRenew", "StreamTake", "TokenBuckets"]


@dataclass(frozen=True, slots=True)
class Bucket(Layout):
    """A token bucket and its refill rate (tokens a second) and burst."""

    LUA = "BUCKET"
    bucket: str = key()
    rate: str = arg()
    burst: str = arg()


@dataclass(frozen=True, slots=True)
class TokenBuckets(ScriptCall):
    SCRIPT = "token_buckets"
    want: int = arg()
    whole: str = arg()
    buckets: Sequence[Bucket] = group()


@dataclass(frozen=True, slots=True)
class StreamTake(ScriptCall):
    SCRIPT = "stream_take"
    streams: str = key()
    member: str = arg()
    max_streams: int = arg()
    lease_ms: int = arg()


@dataclass(frozen=True, slots=True)
class Slot(Layout):
    """A stream slot a web process holds."""

    LUA = "SLOT"
    slot: str = arg()


@dataclass(frozen=True, slots=True)
class StreamRenew(ScriptCall):
    SCRIPT = "stream_renew"
    streams: str = key()
    lease_ms: int = arg()
    slots: Sequence[Slot] = group()
