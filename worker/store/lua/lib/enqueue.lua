-- requires: counts, index, admit, retained, user_bytes
-- Admitting a batch of events whole or not at all (ENQUEUE, ENQUEUE_PUSH): a Redis that is full (noeviction)
-- refuses the script's first write, before anything was written, and the script stops there; a key of the wrong
-- type is found before the first write too ("REFUSED …", nothing written). A batch that would take a scope's
-- inbox past max_inbox, the tenant's queued events past max_queued or its retained events past max_events (with
-- its new events: a duplicate stores nothing; each counted once per started retained_unit_bytes of its stored
-- form, worker/store/quotas.py), a user's retained events past max_user_events (the new events naming them), or a
-- stored-bytes count at its quota (a user the batch names, then the tenant's), is refused whole before any write:
-- "OVERLIMIT inbox <scopeRef> <depth>", "OVERLIMIT tenant <queued>",
-- "OVERLIMIT events <retained (the dead and the waiting past the window included)> <retryAfterS> <dead> <waiting>",
-- "OVERLIMIT userevents <n-th user> <retained> <retryAfterS>" or "OVERLIMIT user <n-th count> <bytes>
-- <retryAfterS, 0: none>" (the door answers 429; the quotas' counts are worker/store/quotas.py's). An event naming
-- a user whose event key (its dedupe key) holds, or an earlier event of the batch gives, another user's event
-- refuses the batch too: "USERCONFLICT <eventId> <userId>" (the door answers 422 user_mismatch).
-- h: the script's header (its named keys and arguments); the events' Admission layouts start at KEYS[k0] and
-- ARGV[a0]; then the users' retained-event counts (UserEvents layouts, h.user_events_count of them: each its
-- key and its user), counted whenever the retained count is (h.retained_slot_ms above 0); the stored-bytes
-- counts (UserBytes layouts, h.user_count of them: each its key and its quota); the guards (Guard layouts,
-- h.guard_count of them: each an event's record and the place in the batch of the event it guards) end KEYS and ARGV.
-- A guarded event is admitted only while that record is no tombstone (its erasedAt unset): else the batch is
-- refused before any write, "ERASED <position>" (the first such event, numbered from 1; the door then answers it
-- as its admission hook asked and sends the rest again). A run's completion so cannot bring back a user whose
-- erasure reached the run's origin between the hook's look and this script (a scale walk's erasure race).
-- -> the events (read), one {accepted(1|0), publish(1|0)} per event (a repeat inside the batch is a
--    duplicate); or nil and the error reply refusing the batch
local USER_KEYS, USER_ARGS = 1, 1
local USER_EVENTS_KEYS, USER_EVENTS_ARGS = 1, 1
local GUARD_KEYS, GUARD_ARGS = 1, 1
-- The first of the g guards (the last g layouts of KEYS and ARGV) whose record is a tombstone. -> nil | the refusal
local function guard_refusal(g)
  local k, a = #KEYS - g * GUARD_KEYS + 1, #ARGV - g * GUARD_ARGS + 1
  for _ = 1, g do
    local origin = KEYS[k]
    local position = ARGV[a]
    if redis.call('TYPE', origin).ok == 'hash' and redis.call('HEXISTS', origin, 'erasedAt') == 1 then
      return redis.error_reply('ERASED ' .. position)
    end
    k, a = k + GUARD_KEYS, a + GUARD_ARGS
  end
  return nil
end
-- When a retained count over its quota frees room for a batch of `fresh` units: the oldest counted slot's end; 0
-- when the batch alone is over the quota, or nothing is counted (waiting does not help, a smaller batch may).
local function retained_retry_s(oldest, now, slot_ms, fresh, max)
  if oldest == nil or fresh > max then return 0 end
  return math.max(1, math.ceil(((oldest + RETAINED_SLOTS + 1) * slot_ms - now) / 1000))
end
-- The tenant's retained events with the batch's new ones, checked against max (a duplicate stores nothing); its
-- dead events that died before the oldest slot counted count too, one each (a dead event never expires, and one
-- that died before that slot began was admitted before it: worker/store/quotas.py), and so do its events still
-- queued or running that were admitted before that slot (active: scored by admission; a backlog that outlives the
-- window, every worker down, is still in Redis).
-- -> the count's stale slots | nil, the refusal
local function tenant_events(key, dlq, active, events, units, max, now, slot_ms)
  local held, oldest, stale = retained_count(key, now, slot_ms)
  local before = '(' .. string.format('%d', (math.floor(now / slot_ms) - RETAINED_SLOTS) * slot_ms)
  local dead = redis.call('ZCOUNT', dlq, '-inf', before)
  local waiting = redis.call('ZCOUNT', active, '-inf', before)
  held = held + dead + waiting
  local adding = 0
  for i = 1, #events do adding = adding + units[i] end
  local fresh = adding
  if held + adding > max then  -- count only the new events
    for i, e in ipairs(events) do
      if e.exists then fresh = fresh - units[i] end  -- typed by admit_refusal, before any write
    end
  end
  if held + fresh > max then  -- waiting frees nothing the dead hold: a redrive or discard does
    local retry_s = dead + fresh > max and 0 or retained_retry_s(oldest, now, slot_ms, fresh, max)
    -- a backlog past the window: room comes as workers drain it, not when the oldest slot leaves (up to a day)
    if waiting > 0 and dead + fresh <= max and (retry_s == 0 or retry_s > BACKLOG_RETRY_S) then
      retry_s = BACKLOG_RETRY_S
    end
    return nil, redis.error_reply('OVERLIMIT events ' .. held .. ' ' .. retry_s .. ' ' .. dead .. ' ' .. waiting)
  end
  return stale, nil
end
-- The users' shares (n UserEvents layouts from KEYS[k], ARGV[a]): each user's count read and, with max above 0,
-- checked with the batch's new events naming them. -> {user_id -> {key, stale, added = 0}} | nil, the refusal
local function user_shares(events, units, n, k, a, max, now, slot_ms)
  local counted, fresh_of = {}, {}
  if max > 0 and n > 0 then  -- each user's new units, in one pass over the batch (not one per user)
    for i, e in ipairs(events) do
      if not e.exists then fresh_of[e.user_id] = (fresh_of[e.user_id] or 0) + units[i] end
    end
  end
  for place = 1, n do
    local events_key = KEYS[k]
    local user_id = ARGV[a]
    k, a = k + USER_EVENTS_KEYS, a + USER_EVENTS_ARGS
    local held, oldest, stale = retained_count(events_key, now, slot_ms)
    if max > 0 then
      local fresh = fresh_of[user_id] or 0
      if held + fresh > max then
        local retry_s = retained_retry_s(oldest, now, slot_ms, fresh, max)
        return nil, redis.error_reply('OVERLIMIT userevents ' .. place .. ' ' .. held .. ' ' .. retry_s)
      end
    end
    counted[user_id] = {key = events_key, stale = stale, added = 0}
  end
  return counted, nil
end
local function enqueue(h, k0, a0)
  if wrong_type(h.scopes, 'set') or wrong_type(h.stats, 'hash') or wrong_type(h.runs_types, 'zset')
    or wrong_type(h.dlq, 'zset') then
    return nil, nil, redis.error_reply('REFUSED WRONGTYPE: the scopes set, the stats hash or the types registry')
  end
  local n_users, n_user_events, n_guards = tonumber(h.user_count), tonumber(h.user_events_count),
    tonumber(h.guard_count)
  if n_guards > 0 then
    local refusal = guard_refusal(n_guards)
    if refusal then return nil, nil, refusal end
  end
  local keys_end, args_end = #KEYS - n_guards * GUARD_KEYS, #ARGV - n_guards * GUARD_ARGS  -- before the guards
  local n = (keys_end - (k0 - 1) - n_users * USER_KEYS - n_user_events * USER_EVENTS_KEYS) / ADMISSION_KEYS
  local events, checked, owners = {}, {}, {}
  for i = 1, n do
    local e = admission(KEYS, k0 + (i - 1) * ADMISSION_KEYS, ARGV, a0 + (i - 1) * ADMISSION_ARGS)
    events[i] = e
    local refusal = admit_refusal(e, checked)
    if refusal then return nil, nil, redis.error_reply('REFUSED WRONGTYPE: ' .. refusal) end
    -- one dedupe key, two owners (two users, or a user and none): the second is refused, not answered the first
    -- one's event as its duplicate. An erased event's tombstone names nobody: a replay is its duplicate.
    local owner = owners[e.ev]
    if owner == nil then
      owner = e.user_id
      if e.exists then
        local rec = redis.call('HMGET', e.ev, 'userId', 'erasedAt')
        if not rec[2] then owner = rec[1] or '' end
      end
      owners[e.ev] = owner
    end
    if owner ~= e.user_id then
      return nil, nil, redis.error_reply('USERCONFLICT ' .. e.event_id .. ' ' .. e.user_id)
    end
  end
  local max_inbox, max_queued = tonumber(h.max_inbox), tonumber(h.max_queued)
  if max_queued > 0 then
    local queued = tonumber(redis.call('HGET', h.stats, 'queued') or '0')
    if queued + n > max_queued then return nil, nil, redis.error_reply('OVERLIMIT tenant ' .. queued) end
  end
  local now, max_events, slot_ms = tonumber(h.now_ms), tonumber(h.max_events), tonumber(h.retained_slot_ms)
  local retained_stale, users_stale = {}, {}
  local unit_bytes, units = tonumber(h.retained_unit_bytes), {}
  if slot_ms > 0 then
    for i, e in ipairs(events) do units[i] = math.max(1, math.ceil(#e.body / unit_bytes)) end
  end
  if max_events > 0 and slot_ms > 0 then
    local refusal
    retained_stale, refusal = tenant_events(h.retained, h.dlq, h.runs_active, events, units, max_events, now,
      slot_ms)
    if refusal then return nil, nil, refusal end
  end
  -- the users' shares: their counts follow the events' layouts, before the stored-bytes counts
  local counted_users, share_refusal = user_shares(events, units, slot_ms > 0 and n_user_events or 0,
    k0 + n * ADMISSION_KEYS, a0 + n * ADMISSION_ARGS, tonumber(h.max_user_events), now, slot_ms)
  if share_refusal then return nil, nil, share_refusal end
  local users = {}
  for u = 1, n_users do
    local k, a = keys_end - (n_users - u + 1) * USER_KEYS + 1, args_end - (n_users - u + 1) * USER_ARGS + 1
    local bytes_key = KEYS[k]
    local max_bytes = ARGV[a]
    users[u] = bytes_key
    local used, earliest, stale = user_bytes(bytes_key, now)
    users_stale[u] = stale
    if used >= tonumber(max_bytes) then
      return nil, nil, redis.error_reply('OVERLIMIT user ' .. u .. ' ' .. used .. ' ' ..
        user_bytes_retry_s(earliest, now))
    end
  end
  if max_inbox > 0 then
    local adding = {}
    for _, e in ipairs(events) do
      adding[e.inbox] = (adding[e.inbox] or redis.call('LLEN', e.inbox)) + 1
      if adding[e.inbox] > max_inbox then
        return nil, nil, redis.error_reply('OVERLIMIT inbox ' .. e.scope_ref .. ' ' .. (adding[e.inbox] - 1))
      end
    end
  end
  local at = {scopes = h.scopes, stats = h.stats, paused = h.paused, runs_active = h.runs_active,
    runs_types = h.runs_types, now = h.now_ms, window = h.window_s, sched_ttl = h.sched_ttl_ms,
    max = tonumber(h.run_index_max), batch = new_batch(events)}
  local out = {}
  local accepted = 0
  for i, e in ipairs(events) do
    out[i] = admit(e, at)
    if out[i][1] == 1 then
      accepted = accepted + (units[i] or 1)
      local user = counted_users[e.user_id]
      if user then user.added = user.added + units[i] end
    end
  end
  -- after the first write: forgetting first would let a script on a full store write (worker/store/server/full.py)
  if slot_ms > 0 and accepted > 0 then retained_add(h.retained, now, slot_ms, accepted, retained_stale) end
  for _, user in pairs(counted_users) do
    if user.added > 0 then retained_add(user.key, now, slot_ms, user.added, user.stale) end
  end
  for u, stale in pairs(users_stale) do forget_fields(users[u], stale) end
  index_trim(h.now_ms, h.window_s)
  counts_flush()
  return events, out, nil
end
