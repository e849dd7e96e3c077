"""The server-side Lua scripts: every multi-key state change of the pipeline is one atomic round trip.

Each script's contract is in the comment above it: the lease and outbox scripts here, an event's life in
:mod:`worker.store.scripts_lifecycle`, operators' actions in :mod:`worker.store.scripts_ops`. Scripts are registered once
per Redis client (``register_script`` uses EVALSHA and falls back to EVAL after a server restart).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from redis import Redis
from redis.commands.core import Script

from worker.keys.layout import Keys
from worker.store.journal import JOURNAL_APPLY_SCRIPT
from worker.store.scripts_batch import COMMIT_BATCH, PEEK_FRESH
from worker.store.scripts_enqueue import ENQUEUE_BATCH, ENQUEUE_PUSH
from worker.store.scripts_lifecycle import ACQUIRE, COMMIT, STAGED
from worker.store.scripts_ops import CANCEL, DISCARD, REDRIVE, RESUME, RUNS_PAGE

__all__ = ["Scripts"]

# Extend the lease only if we still own it.  KEYS: lease  ARGV: token, ttlMs  -> 1 | 0
RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

# Hand the scope off: release our lease but keep the scheduled-drain marker (the caller publishes the next
# drain). Releasing an idle scope happens inside ACQUIRE/COMMIT, atomically with the empty-inbox check, so
# an event appended while we release is never stranded.
# KEYS: lease   ARGV: token   -> -1 another holder owns it | 1 released (or had already expired)
RELEASE = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return -1 end
if holder then redis.call('DEL', KEYS[1]) end
return 1
"""

# Apply an action's staged effects and mark its idempotency lane, once, if our fence is current.
# KEYS: idem, fence   ARGV: fence, resultJson, ttlS, effectsJson (list of command lists)
# -> {1} applied | {0} lane already marked (nothing done) | {-1} stale fence (nothing done)
#    | {-3, index, reason} a staged command was refused or failed (see STAGED); the lane stays unmarked
APPLY = (
    STAGED
    + """
if redis.call('EXISTS', KEYS[1]) == 1 then return {0} end
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return {-1} end
local staged = cjson.decode(ARGV[4])
local refused = check_staged(staged)
if refused then return {-3, refused[1], refused[2]} end
local broken = apply_staged(staged)
if broken then return {-3, broken[1], broken[2]} end
redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
return {1}
"""
)

# Claim the next outbox record due now (Redis's clock): its due time moves one lease ahead, and that deadline
# is the claim (a relay that dies leaves it due again when the lease runs out).
# KEYS: outbox-due   ARGV: leaseMs   -> {} nothing due | {member, deadline}
OUTBOX_CLAIM = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 1)
if #due == 0 then return {} end
local deadline = now + tonumber(ARGV[1])
redis.call('ZADD', KEYS[1], 'XX', deadline, due[1])
return {due[1], deadline}
"""

# Settle a claimed outbox record, only while the claim holds (its due time is still our deadline).
# KEYS: outbox-due, record   ARGV: member, deadline, recordJson, nextDue ('' = done: leave outbox-due)
# -> 1 settled | 0 the claim was lost (another relay took the record; nothing written)
OUTBOX_SETTLE = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) ~= tonumber(ARGV[2]) then return 0 end
redis.call('SET', KEYS[2], ARGV[3], 'KEEPTTL')
if ARGV[4] == '' then redis.call('ZREM', KEYS[1], ARGV[1]) else redis.call('ZADD', KEYS[1], 'XX', ARGV[4], ARGV[1]) end
return 1
"""


@dataclass(frozen=True, slots=True)
class Scripts:
    """The scripts, registered on one client. :meth:`for_tenant` binds the tenant's keys that ACQUIRE needs
    besides the scope's (paused scopes, stats, two status indexes), so a :class:`~worker.drain.lease.ScopeLease`
    built on ``store.scripts`` passes the scope's keys only."""

    enqueue_batch: Script
    enqueue_push: Script
    acquire_script: Script
    renew: Script
    release: Script
    commit: Script
    apply: Script
    redrive: Script
    outbox_claim: Script
    outbox_settle: Script
    discard: Script
    cancel: Script
    resume: Script
    runs_page: Script
    commit_batch: Script
    peek_fresh: Script
    journal_apply: Script
    acquire_keys: tuple[str, ...] = ()

    @classmethod
    def register(cls, client: Redis) -> Scripts:
        return cls(
            enqueue_batch=client.register_script(ENQUEUE_BATCH),
            enqueue_push=client.register_script(ENQUEUE_PUSH),
            acquire_script=client.register_script(ACQUIRE),
            renew=client.register_script(RENEW),
            release=client.register_script(RELEASE),
            commit=client.register_script(COMMIT),
            apply=client.register_script(APPLY),
            redrive=client.register_script(REDRIVE),
            outbox_claim=client.register_script(OUTBOX_CLAIM),
            outbox_settle=client.register_script(OUTBOX_SETTLE),
            discard=client.register_script(DISCARD),
            cancel=client.register_script(CANCEL),
            resume=client.register_script(RESUME),
            runs_page=client.register_script(RUNS_PAGE),
            commit_batch=client.register_script(COMMIT_BATCH),
            peek_fresh=client.register_script(PEEK_FRESH),
            journal_apply=client.register_script(STAGED + JOURNAL_APPLY_SCRIPT),
        )

    def for_tenant(self, keys: Keys) -> Scripts:
        """The same scripts, ACQUIRE bound to ``keys``' tenant (to nothing with scope buckets: each scope's
        bucket has its own, see :func:`acquire_keys_of`)."""
        bound = acquire_keys_of(keys) if keys.own else ()
        return self if bound == self.acquire_keys else replace(self, acquire_keys=bound)

    def acquire(self, *, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """ACQUIRE with the scope's ``keys`` (lease, fence, inbox, sched, scopes) and the tenant's bound ones."""
        return self.acquire_script(keys=[*keys, *self.acquire_keys], args=list(args))


def acquire_keys_of(keys: Keys) -> tuple[str, ...]:
    """ACQUIRE's index keys of the bucket ``keys`` is bound to: paused, stats, runs:status:active and
    runs:status:cancelled."""
    return (keys.runs("paused"), keys.stats, keys.runs("status", "active"), keys.runs("status", "cancelled"))
