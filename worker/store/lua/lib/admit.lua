-- requires: counts, index
-- Admitting one event: claim its dedupe record (the event hash), append it to its scope's inbox and index it,
-- or count a duplicate. The door's ENQUEUE scripts admit a batch; COMMIT admits the follow-up events a chain
-- emitted. An event's admission is laid out as the ADMISSION group (worker/store/calls/admission.py): its keys,
-- then its arguments.
local function wrong_type(key, want)
  local found = redis.call('TYPE', key).ok
  return found ~= 'none' and found ~= want
end
-- wrong_type, asked once per key of `checked` (a key found right stays right: nothing before the first write
-- changes a type).
local function wrong_type_once(checked, key, want)
  if checked[key] then return false end
  checked[key] = true
  return wrong_type(key, want)
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
-- Checked before a script writes anything: nil, or why admitting e would fail midway. The event's own key is
-- typed here, so e.exists says whether it was there before the script (ENQUEUE's batch reads it instead of an
-- EXISTS). checked (optional, one batch's): the other keys already found right, each typed once per batch
-- (a burst's events share their scope's inbox, drain marker and counter).
local function admit_refusal(e, checked)
  local found = redis.call('TYPE', e.ev).ok
  if found ~= 'none' and found ~= 'hash' then return e.ev .. ' is not a hash' end
  e.exists = found == 'hash'
  checked = checked or {}
  if wrong_type_once(checked, e.inbox, 'list') then return e.inbox .. ' is not a list' end
  if wrong_type_once(checked, e.sched, 'string') then return e.sched .. ' is not a string' end
  if wrong_type_once(checked, e.seq, 'string') then return e.seq .. ' is not a string' end
  return nil
end
-- One ENQUEUE batch's memory of what its admissions already did (admit's at.batch; COMMIT's follow-ups have
-- none and ask Redis each time): the event keys it wrote, per scope counter how many new events it will number
-- (need, counted before any write) and the next number to hand out, per drain marker whether its scope was
-- found paused (false) or marked and registered (true), and the users added to each scope's users. A burst of
-- 500 events over 8 scopes then pays these once per scope, not once per event.
local function new_batch(events)
  local need, seen = {}, {}
  for _, e in ipairs(events) do
    if not e.exists and not seen[e.ev] then  -- typed by admit_refusal: stored before, or a repeat in the batch
      seen[e.ev] = true
      need[e.seq] = (need[e.seq] or 0) + 1
    end
  end
  return {admitted = {}, seq_need = need, seq_next = {}, sched = {}, users = {}}
end
-- The next enqueue number of e's scope. A batch takes all its numbers for a scope with the INCRBY of the scope's
-- first new event, so the counter is never behind a number already stored, even if the script stops midway.
local function next_seq(e, batch)
  if not batch then return redis.call('INCR', e.seq) end
  local n = batch.seq_next[e.seq]
  if not n then
    local need = batch.seq_need[e.seq] or 1
    n = redis.call('INCRBY', e.seq, string.format('%d', need)) - need + 1
  end
  batch.seq_next[e.seq] = n + 1
  return n
end
local function scope_user_add(e, user, batch)
  if batch then
    local users = batch.users[e.scope_users]
    if not users then
      users = {}
      batch.users[e.scope_users] = users
    end
    if users[user] then return end
    users[user] = true
  end
  redis.call('SADD', e.scope_users, user)
end
-- at: the tenant's keys and the numbers every admission shares: {scopes, stats, paused, runs_active,
-- runs_types, now, window, sched_ttl, max}. -> {1, publish(0|1)} accepted (publish=1: no drain is scheduled for the scope,
-- send one) | {0, 0} duplicate. The event keeps its enqueue number (seq), so a redrive can tell whether later
-- events of its scope were enqueued after it (and so ran before it); the scopes registry holds the scope ref
-- "<tenant>/<scopeKey>", the event its bare scope key; scope_users names the users whose events the scope holds
-- (erasure drops a scope whole only when it is one user's).
local function admit(e, at)
  local batch = at.batch
  local exists
  if batch then exists = e.exists or batch.admitted[e.ev] else exists = redis.call('EXISTS', e.ev) == 1 end
  if exists then
    redis.call('HINCRBY', e.ev, 'duplicates', '1')
    count(at.stats, 'duplicate', 1)
    return {0, 0}
  end
  local scope = string.sub(e.scope_ref, (string.find(e.scope_ref, '/', 1, true) or 0) + 1)
  local t = at.now  -- scores and numbers reach Redis as strings: a Lua number costs a %.17g snprintf each
  -- no 'eventId' field: the id is the key's suffix (readers pass it to status_record)
  redis.call('HSET', e.ev, 'state', 'queued', 'scopeKey', scope, 'event', e.body, 'enqueuedAt', at.now,
    'attempts', '0', 'seq', string.format('%d', next_seq(e, batch)), 'sourceType', e.source_type, 'sourceId',
    e.source_id)
  if batch then batch.admitted[e.ev] = true end
  -- No TTL while it waits or runs: a scope paused, or a backlog, longer than the dedupe window lost its accepted
  -- events without a word. It gets the window when it ends (done, cancelled, discarded); dead keeps it.
  redis.call('RPUSH', e.inbox, e.event_id)
  -- no index of all events: the type indexes hold each event in exactly one of them (worker/ops/runs.py)
  index_add_typed(e.runs_type, t, e.event_id, at.max, at.runs_types, e.source_type, at.runs_active)
  index_add(e.runs_scope, t, e.event_id, at.max)
  -- queued and running events: bounded by the tenant's queue limit, so a backlog is listed whole
  index_add_active(at.runs_active, t, e.event_id)
  index_add(e.by_source, t, e.source_member, 0)
  if e.user_id ~= '' then
    redis.call('HSET', e.ev, 'userId', e.user_id)
    index_add_kept(e.user_index, t, e.event_id, at.window)
    scope_user_add(e, e.user_id, batch)
  else
    scope_user_add(e, '*', batch)  -- an event of nobody in particular: the scope is never one user's alone
  end
  count(at.stats, 'accepted', 1)
  count(at.stats, 'queued', 1)  -- the tenant's events not yet done or dead (its quota)
  -- A batch asks once per scope: nothing in ENQUEUE pauses a scope, and its drain marker, once set or found
  -- set by the scope's first event, is there for the rest of the batch (a later SET NX would find it).
  if batch and batch.sched[e.sched] ~= nil then return {1, 0} end
  if redis.call('HEXISTS', at.paused, scope) == 1 then
    if batch then batch.sched[e.sched] = false end
    return {1, 0}
  end
  redis.call('SADD', at.scopes, e.scope_ref)
  local scheduled = redis.call('SET', e.sched, at.sched_ttl, 'NX', 'PX', at.sched_ttl)
  if batch then batch.sched[e.sched] = true end
  if scheduled then return {1, 1} end
  return {1, 0}
end
