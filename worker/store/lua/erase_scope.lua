-- ERASE_SCOPE: one scope's part of erasing a user (worker/ops/erasure.py), under the lease the erasure took
-- (ERASE_HOLD) and checked here, at the write, not when the erasure looked. The lease must still be the
-- erasure's. The erasure calls it a chunk of the user's events at a time; the last chunk (last '1') scans the inbox
-- and decides: the scope is dropped whole only when may_drop is 1 (no session of it names another user), its users
-- (scope_users) are this user alone, and no event of anyone else waits in its inbox; otherwise it is shared.
--
-- Each of the user's events (the ERASED group, and any of theirs the inbox holds that the caller did not know:
-- enqueued since it looked) becomes a tombstone: its payload, user, scope and source ids, errors and attempts go,
-- erasedAt is set. One that had not ended (queued, processing) or was dead becomes 'erased': out of the tenant's
-- queued count, the active or dead index and the DLQ, kept for the dedupe window (it is never redriven,
-- discarded or run). Its chain (and the one it stored under its chain id before chains were kept per event, which
-- the caller found: legacy_chain, the event's own chain key when there is none) and its outbox index go, and its
-- outbox records (the RECORD group) with their due entries. Shared: its events leave the inbox and the user
-- leaves scope_users. Whole: the scope's inbox, drain
-- marker, counters, fence, users and runs index go, and it leaves the scopes registry (the rest of its keys are the
-- caller's to delete, while it still holds the lease); an operator's pause on it stays, unless its key names the
-- user (the paused hash holds the key: it would keep the id): the id as a whole part of it, between its ends,
-- ':' and '/' (user:<id>, user:<id>/inbox, agent:a:user:<id>), not inside a word (a review: erasing user `ops`
-- lifted the pause on topic:maintenance-ops-freeze).
-- The lanes an unfinished event kept (lib/kept_lanes.lua) are deleted unless another unfinished event keeps them
-- too; so are those an ended event named (endedLanes: a cancelled or discarded event stores no chain) and the
-- lanes of the actions the caller read in the chunk's chains (the LANE group), each when it has a TTL: a finished
-- action's lane lives its own TTL, past the chain and the record, and a receipt's lane key names the user; one
-- without is an unfinished event's.
-- -> {-1} the lease is not the erasure's (nothing written) | {1 whole | 0 shared, tombstones written, chains
--    deleted, lanes deleted}
-- requires: kept_lanes
local lease, scope_users, inbox, sched, seq, fence_key, runs_scope, scopes, paused, stats, dlq, runs_active,
  runs_dead, outbox_due, journal_due, outbox_dead, lane_holders = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5],
  KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13], KEYS[14], KEYS[15], KEYS[16], KEYS[17]
local token, user_id, scope_key, scope_ref, ev_prefix, now_ms, window_s, may_drop, event_count, last,
  lane_count = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11]
if redis.call('GET', lease) ~= token then return {-1} end

local SHARED_MARK = '*shared'  -- no user id holds '*' (worker/core/ids.py)
local PART_ENDS = {[''] = true, [':'] = true, ['/'] = true}
-- Whether `key` holds `id` as a whole part: each end of an occurrence at the key's end, ':' or '/'.
local function names_user(key, id)
  local from = 1
  while true do
    local first, last = string.find(key, id, from, true)
    if not first then return false end
    if PART_ENDS[string.sub(key, first - 1, first - 1)] and PART_ENDS[string.sub(key, last + 1, last + 1)] then
      return true
    end
    from = first + 1
  end
end
local DROPS = {'event', 'userId', 'scopeKey', 'sourceId', 'error', 'chainId', 'lastError', 'history',
  'discardReason', 'endedLanes'}
local ENDED = {done = true, cancelled = true, discarded = true, erased = true}
local mine, order = {}, {}
local k, a = 18, 12
for _ = 1, tonumber(event_count) do
  local ev, chain, outbox_of, legacy_chain = KEYS[k], KEYS[k + 1], KEYS[k + 2], KEYS[k + 3]
  local event_id = ARGV[a]
  local ERASED_KEYS, ERASED_ARGS = 4, 1
  mine[event_id] = {ev = ev, chain = chain, outbox_of = outbox_of}
  if legacy_chain ~= chain then mine[event_id].legacy = legacy_chain end
  order[#order + 1] = event_id
  k, a = k + ERASED_KEYS, a + ERASED_ARGS
end
local lanes = 0
for _ = 1, tonumber(lane_count) do
  local lane = KEYS[k]
  local LANE_KEYS, LANE_ARGS = 1, 0
  -- one without a TTL is kept by an unfinished event: the user's own (its tombstone below lets go of it) or
  -- another's, whose redrive would apply it again
  if redis.call('PTTL', lane) ~= -1 then lanes = lanes + redis.call('DEL', lane) end
  k, a = k + LANE_KEYS, a + LANE_ARGS
end

-- The inbox now (the last chunk only: one pass however many chunks): the user's events the caller did not know,
-- and whether an event of anyone else waits there.
local others = false
for _, id in ipairs(last == '1' and redis.call('LRANGE', inbox, 0, -1) or {}) do
  local rec = redis.call('HMGET', ev_prefix .. id, 'userId', 'state')
  if rec[1] == user_id then
    if not mine[id] then
      mine[id] = {ev = ev_prefix .. id}
      order[#order + 1] = id
    end
  elseif rec[2] and not ENDED[rec[2]] then
    others = true
  end
end
local whole = last == '1' and may_drop == '1' and not others
if whole then
  for _, u in ipairs(redis.call('SMEMBERS', scope_users)) do
    if u ~= user_id and u ~= SHARED_MARK then whole = false end
  end
end

-- -> 1 when a record was made a tombstone (0: none, or it is not the user's: its id came again, for someone
-- else, after the user's record expired), and the chains deleted.
local function tombstone(id, e)
  local legacy = e.legacy and redis.call('DEL', e.legacy) or 0  -- the caller read that this event wrote it
  local rec = redis.call('HMGET', e.ev, 'state', 'userId', 'erasedAt')
  local state = rec[1]
  if state and rec[2] ~= user_id and not rec[3] then return 0, legacy end
  if state then
    lanes = lanes + release_lanes(e.ev, lane_holders, nil) + erase_ended_lanes(e.ev)
    redis.call('HDEL', e.ev, unpack(DROPS))
    redis.call('HSET', e.ev, 'erasedAt', now_ms)
    if not ENDED[state] then
      redis.call('HSET', e.ev, 'state', 'erased')
      if state == 'dead' then
        redis.call('ZREM', dlq, id)
        redis.call('ZREM', runs_dead, id)
      else
        redis.call('HINCRBY', stats, 'queued', -1)  -- it will never run: out of the tenant's queue quota
        redis.call('ZREM', runs_active, id)
      end
      redis.call('EXPIRE', e.ev, window_s)
    elseif redis.call('TTL', e.ev) < 0 then
      redis.call('EXPIRE', e.ev, window_s)
    end
  end
  if e.outbox_of then redis.call('DEL', e.outbox_of) end
  return state and 1 or 0, legacy + (e.chain and redis.call('DEL', e.chain) or 0)
end
local written, chains = 0, 0
for _, id in ipairs(order) do
  local n, c = tombstone(id, mine[id])
  written, chains = written + n, chains + c
end
while k <= #KEYS do
  local record = KEYS[k]
  local record_id = ARGV[a]
  local RECORD_KEYS, RECORD_ARGS = 1, 1
  local member = scope_ref .. '\31' .. record_id
  redis.call('ZREM', outbox_due, member)  -- first: a relay that settles it now finds its claim gone
  redis.call('ZREM', journal_due, member)
  redis.call('ZREM', outbox_dead, member)  -- the member names the record, and so a source id
  redis.call('DEL', record)
  k, a = k + RECORD_KEYS, a + RECORD_ARGS
end

if whole then
  redis.call('DEL', inbox, sched, seq, fence_key, scope_users, runs_scope)
  redis.call('SREM', scopes, scope_ref)
  -- an operator's pause stays (a scope may be paused for reasons of its own, before any event), unless the key,
  -- which the paused hash names, names the user
  if names_user(scope_key, user_id) then redis.call('HDEL', paused, scope_key) end
  return {1, written, chains, lanes}
end
if last == '1' then
  -- Shared: the inbox rebuilt in one pass without the events this erasure (any chunk) made tombstones (no body
  -- left: a drain would pop and skip them), not one LREM, a walk of the whole list, per event.
  local kept = {}
  for _, id in ipairs(redis.call('LRANGE', inbox, 0, -1)) do
    if redis.call('HEXISTS', ev_prefix .. id, 'event') == 1 then kept[#kept + 1] = id end
  end
  redis.call('DEL', inbox)
  for first = 1, #kept, 1000 do  -- Lua's unpack stops near 8,000 values: a chunk at a time
    redis.call('RPUSH', inbox, unpack(kept, first, math.min(first + 999, #kept)))
  end
  redis.call('SREM', scope_users, user_id)
  -- kept shared with the user its last name (a session there names another): SHARED_MARK keeps the set, so the
  -- plugins' erasers do not take the scope for the user's alone; the whole-scope check above ignores it, so the
  -- session's own user, erased later, still has the scope dropped whole
  if redis.call('SCARD', scope_users) == 0 then redis.call('SADD', scope_users, SHARED_MARK) end
end
return {0, written, chains, lanes}
