"""The door's admission scripts: ENQUEUE_BATCH and ENQUEUE_PUSH admit a batch of events whole or not at all,
after its limits and quotas (ADMIT, the one event's admission they run, is in :mod:`worker.store.scripts_lifecycle`;
the quotas' counts are :mod:`worker.store.quotas`'s). :mod:`worker.store.scripts` registers them.
"""

from __future__ import annotations

from worker.store.quotas import RETAINED_FN, USER_BYTES_FN
from worker.store.scripts_fair import READY_PUSH_FN
from worker.store.scripts_lifecycle import ADMIT
from worker.store.scripts_ops import RUN_INDEX

__all__ = ["ENQUEUE_BATCH", "ENQUEUE_PUSH"]

# Enqueue a batch (see ADMIT) in one script, so it is stored whole or not at all: a Redis that is full
# (noeviction) refuses the script's first write, before anything was written, and the script stops there;
# a key of the wrong type is found before the first write too (a "REFUSED …" error, nothing written).
# KEYS: scopes, stats, paused, runs:all, runs:status:active, retained-events, then per event: ev, inbox, sched,
#       seq, user index, scope users, runs:type:<t>, runs:scope:{s}, by-source:<bucket> (all the tenant's: one
#       slot), then the batch's users' bytes:user:<u> (as many as ARGV[11] says)
# ARGV: nowMs, windowS, schedTtlMs, tenant, maxInboxDepth, maxTenantQueued (0: no limit), runIndexMax,
#       maxTenantEvents (0: no check), retainedSlotMs (0: not counted), maxUserBytes (0: no check), users, then
#       per event: eventId, scopeRef (<tenant>/<scopeKey>), eventJson, userId ('' when none), sourceType,
#       sourceId, sourceMember (<digest>:<eventId>)
# A batch that would take a scope's inbox past maxInboxDepth, the tenant's queued events past maxTenantQueued
# or its retained events past maxTenantEvents (with its new events: a duplicate stores nothing), or that names a user whose data is at maxUserBytes, is refused
# whole before any write: "OVERLIMIT inbox <scopeRef> <depth>", "OVERLIMIT tenant <queued>", "OVERLIMIT events
# <retained> <retryAfterS>" or "OVERLIMIT user <n-th user> <bytes> <retryAfterS, 0: none>" (the door answers 429).
# The quotas' counts are worker/store/quotas.py's.
# -> one {accepted(1|0), publish(1|0)} per event, in order (a repeat inside the batch is a duplicate)
_ENQUEUE = """
if wrong_type(KEYS[1], 'set') or wrong_type(KEYS[2], 'hash') then
  return redis.error_reply('REFUSED WRONGTYPE: the scopes set or the stats hash')
end
{check}local K, A, KH, AH = 9, 7, {kh}, {ah}  -- per event, and the header before the events
local n_users = tonumber(ARGV[11])
local n = (#KEYS - KH - n_users) / K
for i = 0, n - 1 do
  local k = KH + 1 + i * K
  local refusal = admit_refusal(KEYS[k], KEYS[k + 1], KEYS[k + 2], KEYS[k + 3])
  if refusal then return redis.error_reply('REFUSED WRONGTYPE: ' .. refusal) end
end
local max_inbox, max_queued = tonumber(ARGV[5]), tonumber(ARGV[6])
if max_queued > 0 then
  local queued = tonumber(redis.call('HGET', KEYS[2], 'queued') or '0')
  if queued + n > max_queued then return redis.error_reply('OVERLIMIT tenant ' .. queued) end
end
local now, max_events, slot_ms, max_bytes = tonumber(ARGV[1]), tonumber(ARGV[8]), tonumber(ARGV[9]),
  tonumber(ARGV[10])
local retained_stale, users_stale = {{}}, {{}}
if max_events > 0 and slot_ms > 0 then
  local held, oldest
  held, oldest, retained_stale = retained_count(KEYS[6], now, slot_ms)
  local fresh = n
  if held + n > max_events then  -- a duplicate stores nothing: count only the new events
    for i = 0, n - 1 do fresh = fresh - redis.call('EXISTS', KEYS[KH + 1 + i * K]) end
  end
  if held + fresh > max_events and oldest then
    local retry_s = math.max(1, math.ceil(((oldest + RETAINED_SLOTS + 1) * slot_ms - now) / 1000))
    return redis.error_reply('OVERLIMIT events ' .. held .. ' ' .. retry_s)
  end
end
if max_bytes > 0 then
  for u = 1, n_users do
    local used, earliest, stale = user_bytes(KEYS[#KEYS - n_users + u], now)
    users_stale[u] = stale
    if used >= max_bytes then
      return redis.error_reply('OVERLIMIT user ' .. u .. ' ' .. used .. ' ' .. user_bytes_retry_s(earliest, now))
    end
  end
end
if max_inbox > 0 then
  local adding = {{}}
  for i = 0, n - 1 do
    local inbox = KEYS[KH + 1 + i * K + 1]
    adding[inbox] = (adding[inbox] or redis.call('LLEN', inbox)) + 1
    if adding[inbox] > max_inbox then
      return redis.error_reply('OVERLIMIT inbox ' .. ARGV[AH + 1 + i * A + 1] .. ' ' .. (adding[inbox] - 1))
    end
  end
end
local out = {{}}
local accepted = 0
for i = 0, n - 1 do
  local k, a = KH + 1 + i * K, AH + 1 + i * A
  local ix = {{all = KEYS[4], active = KEYS[5], type = KEYS[k + 6], scope = KEYS[k + 7], src = KEYS[k + 8],
    smember = ARGV[a + 6], paused = KEYS[3], max = tonumber(ARGV[7]), stype = ARGV[a + 4], sid = ARGV[a + 5]}}
  out[i + 1] = admit(KEYS[k], KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[1], KEYS[2], ARGV[a], ARGV[a + 1],
    ARGV[a + 2], ARGV[1], ARGV[2], ARGV[3], KEYS[k + 4], ARGV[a + 3], KEYS[k + 5], ix)
  accepted = accepted + out[i + 1][1]
end
-- after the first write: forgetting first would let a script on a full store write (worker/store/full.py)
if slot_ms > 0 and accepted > 0 then retained_add(KEYS[6], now, slot_ms, accepted, retained_stale) end
for u, stale in pairs(users_stale) do forget_fields(KEYS[#KEYS - n_users + u], stale) end
index_trim(ARGV[1], ARGV[2])
counts_flush()
{push}return out
"""
ENQUEUE_BATCH = (
    RUN_INDEX + ADMIT + RETAINED_FN + USER_BYTES_FN + _ENQUEUE.format(kh=6, ah=11, check="", push="")
)

# ENQUEUE_BATCH, then each scope it made ready is pushed as READY_PUSH would (worker/runtime/fair.py), in the same
# script: one round trip for an enqueue instead of two, and no moment when a scope has its drain marker but
# is on no ready list. Only where the store is one Redis (worker.runtime.fair.FairQueue.admission_push): on a Redis
# Cluster the ready lists live in another slot than the tenant's keys.
# KEYS: ENQUEUE_BATCH's first 6, ready-tenants, ready:<tenant>, drain-tickets, then per event and users as there
# ARGV: ENQUEUE_BATCH's first 11, ticketsMax, ticketTtlMs, then per event as there
# -> ENQUEUE_BATCH's replies (publish 0: pushed here), then the number of drain tickets taken
ENQUEUE_PUSH = (
    RUN_INDEX
    + ADMIT
    + RETAINED_FN
    + USER_BYTES_FN
    + READY_PUSH_FN
    + _ENQUEUE.format(
        kh=9,
        ah=13,
        check="""if wrong_type(KEYS[7], 'list') or wrong_type(KEYS[8], 'list') or wrong_type(KEYS[9], 'string') then
  return redis.error_reply('REFUSED WRONGTYPE: the ready lists or the drain tickets')
end
""",
        push="""local tickets = 0
for i = 0, n - 1 do
  if out[i + 1][1] == 1 and out[i + 1][2] == 1 then
    local ref = ARGV[AH + 1 + i * A + 1]
    tickets = tickets + ready_push(KEYS[7], KEYS[8], KEYS[9], ARGV[4], ref, ARGV[12], ARGV[13])
    out[i + 1][2] = 0
  end
end
out[n + 1] = tickets
""",
    )
)
