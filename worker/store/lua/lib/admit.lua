-- requires: counts, index
-- Admitting one event: claim its dedupe record (the event hash), append it to its scope's inbox and index it,
-- or count a duplicate. The door's ENQUEUE scripts admit a batch; COMMIT admits the follow-up events a chain
-- emitted. An event's admission is laid out as the ADMISSION group (worker/store/calls.py): its keys, then its
-- arguments.
local function wrong_type(key, want)
  local found = redis.call('TYPE', key).ok
  return found ~= 'none' and found ~= want
end
local ADMISSION_KEYS, ADMISSION_ARGS = 9, 7
-- One event's admission read from its keys (at k) and arguments (at a).
local function admission(keys, k, args, a)
  local ev, inbox, sched, seq, user_index, scope_users, runs_type, runs_scope, by_source =
    keys[k], keys[k + 1], keys[k + 2], keys[k + 3], keys[k + 4], keys[k + 5], keys[k + 6], keys[k + 7], keys[k + 8]
  local event_id, scope_ref, body, user_id, source_type, source_id, source_member =
    args[a], args[a + 1], args[a + 2], args[a + 3], args[a + 4], args[a + 5], args[a + 6]
  return {ev = ev, inbox = inbox, sched = sched, seq = seq, user_index = user_index, scope_users = scope_users,
    runs_type = runs_type, runs_scope = runs_scope, by_source = by_source, event_id = event_id,
    scope_ref = scope_ref, body = body, user_id = user_id, source_type = source_type, source_id = source_id,
    source_member = source_member}
end
-- Checked before a script writes anything: nil, or why admitting e would fail midway.
local function admit_refusal(e)
  if wrong_type(e.ev, 'hash') then return e.ev .. ' is not a hash' end
  if wrong_type(e.inbox, 'list') then return e.inbox .. ' is not a list' end
  if wrong_type(e.sched, 'string') then return e.sched .. ' is not a string' end
  if wrong_type(e.seq, 'string') then return e.seq .. ' is not a string' end
  return nil
end
-- at: the tenant's keys and the numbers every admission shares: {scopes, stats, paused, runs_active,
-- runs_types, now, window, sched_ttl, max}. -> {1, publish(0|1)} accepted (publish=1: no drain is scheduled for the scope,
-- send one) | {0, 0} duplicate. The event keeps its enqueue number (seq), so a redrive can tell whether later
-- events of its scope were enqueued after it (and so ran before it); the scopes registry holds the scope ref
-- "<tenant>/<scopeKey>", the event its bare scope key; scope_users names the users whose events the scope holds
-- (erasure drops a scope whole only when it is one user's).
local function admit(e, at)
  if redis.call('EXISTS', e.ev) == 1 then
    redis.call('HINCRBY', e.ev, 'duplicates', 1)
    count(at.stats, 'duplicate', 1)
    return {0, 0}
  end
  local scope = string.sub(e.scope_ref, (string.find(e.scope_ref, '/', 1, true) or 0) + 1)
  local t = tonumber(at.now)
  -- no 'eventId' field: the id is the key's suffix (readers pass it to status_record)
  redis.call('HSET', e.ev, 'state', 'queued', 'scopeKey', scope, 'event', e.body, 'enqueuedAt', at.now,
    'attempts', 0, 'seq', redis.call('INCR', e.seq), 'sourceType', e.source_type, 'sourceId', e.source_id)
  redis.call('EXPIRE', e.ev, at.window)
  redis.call('RPUSH', e.inbox, e.event_id)
  -- no index of all events: the type indexes hold each event in exactly one of them (worker/ops/runs.py)
  index_add_typed(e.runs_type, t, e.event_id, at.max, at.runs_types, e.source_type, at.runs_active)
  index_add(e.runs_scope, t, e.event_id, at.max)
  -- queued and running events: bounded by the tenant's queue limit, so a backlog is listed whole
  index_add(at.runs_active, t, e.event_id, 0)
  index_add(e.by_source, t, e.source_member, 0)
  if e.user_id ~= '' then
    redis.call('HSET', e.ev, 'userId', e.user_id)
    index_add_kept(e.user_index, t, e.event_id, at.window)
    redis.call('SADD', e.scope_users, e.user_id)
  else
    redis.call('SADD', e.scope_users, '*')  -- an event of nobody in particular: the scope is never one user's alone
  end
  count(at.stats, 'accepted', 1)
  count(at.stats, 'queued', 1)  -- the tenant's events not yet done or dead (its quota)
  if redis.call('HEXISTS', at.paused, scope) == 1 then return {1, 0} end
  redis.call('SADD', at.scopes, e.scope_ref)
  if redis.call('SET', e.sched, at.now, 'NX', 'PX', at.sched_ttl) then return {1, 1} end
  return {1, 0}
end
