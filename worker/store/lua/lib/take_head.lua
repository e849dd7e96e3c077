-- requires: index, history, pending
-- Taking the head of a scope's inbox for processing, and releasing a scope. Heads that are already final (done,
-- dead, cancelled, discarded, erased) or whose record expired are popped and skipped; a head whose cancel was
-- requested while it ran (its worker is gone) is committed cancelled and popped. ev_prefix is Keys.event_prefix
-- (an event's key is the prefix followed by its id: the one key the scripts complete themselves, because the
-- head's id is only known inside the script). ix: {paused, stats, active, cancelled} (paused nil: no pause
-- check). -> {HeadCode.EMPTY} | {HeadCode.PAUSED} (a head waits in a paused scope: nothing taken, nothing popped)
-- | {HeadCode.WAITS, id, notBefore} (the head waits for its retry time) | {HeadCode.TAKEN, id, eventJson, attempts,
-- prevState, lastError, sourceType, sourceId, typedLanes} (state -> processing, an attempt record started;
-- eventJson is worker/documents/event_body.py's form; typedLanes a form's digit or '': below).
--
-- typedLanes: an event first begun here (never delivered, never redriven) is marked with LANE_FORM, for good: the
-- form of its actions' lane keys (worker/core/idempotency.py). An event begun before by a worker of before this
-- form (a later attempt, or a redrive of a dead one) keeps its mark, or none: its lanes keep the keys that worker
-- wrote, so a run here finds what it applied.
local FINAL = {done = true, dead = true, cancelled = true, discarded = true, erased = true}
-- The heads this script took, by event key, until their commit: the event is the head, processing, under our
-- fence and not cancelled (nothing else runs between) -> {enqueued, history, not_before, error, lanes}, so a run's commit
-- of it reads nothing again.
local taken = {}
-- Scopes found not paused by this script (no script that takes a head pauses one), by their paused hash and
-- scope key: a COMMIT that pops the next scope may take the head of another tenant's scope of the same key.
local unpaused = {}
-- The pause is asked once there is a head to take: an empty scope is released whether it is paused or not (the
-- same writes), so a lone event's commit asks nothing more of its emptied inbox than its first index.
local function take_head(inbox, ev_prefix, now, fence, ix, scope)
  local pause_checked = not ix.paused
  for _ = 1, 1000 do
    local id = redis.call('LINDEX', inbox, 0)
    if not id then return {HeadCode.EMPTY} end
    if not pause_checked then
      pause_checked = true
      local seen = ix.paused .. '\n' .. scope
      if not unpaused[seen] then
        if redis.call('HEXISTS', ix.paused, scope) == 1 then return {HeadCode.PAUSED} end
        unpaused[seen] = true
      end
    end
    local ek = ev_prefix .. id
    hflush(ek)
    local rec = redis.call('HMGET', ek, 'state', 'event', 'notBefore', 'error', 'cancelRequested', 'history',
      'redrives', 'sourceType', 'sourceId', 'attempts', 'enqueuedAt', 'lanes', 'typedLanes')
    if not rec[2] or FINAL[rec[1]] then
      redis.call('LPOP', inbox)
      -- a record gone (expired while it waited, before records waiting had no TTL): out of the active index too,
      -- which is neither trimmed nor expiring
      if not rec[2] and ix.active then zchange(ix.active, id, false) end
    elseif rec[5] and ix.stats then
      redis.call('LPOP', inbox)
      mark_cancelled(ek, id, now, ix, {enqueued = rec[11], history = rec[6], not_before = rec[3], lanes = rec[12]})
    else
      -- numbers parsed only where a field holds one (most heads have no retry time and no redrive)
      local nb = rec[3] and tonumber(rec[3]) or 0
      if nb > 0 and nb > tonumber(now) then return {HeadCode.WAITS, id, rec[3]} end
      local attempts = (rec[10] and rec[10] ~= '0' and tonumber(rec[10]) or 0) + 1
      -- the start: in the history; numbers as their digits (fence: the caller's, a string)
      hset_later(ek, 'attempts', string.format('%d', attempts), 'state', 'processing', 'fence', fence)
      local typed = rec[13] or ''
      if typed == '' and attempts == 1 and not rec[7] then  -- its first delivery: marked (the same HSET)
        typed = LANE_FORM
        hset_later(ek, 'typedLanes', typed)
      end
      local h = history_start(ek, rec[6], attempts, now, rec[7] and tonumber(rec[7]) or 0)
      taken[ek] = {enqueued = rec[11], history = h, not_before = rec[3], error = rec[4], lanes = rec[12]}
      return {HeadCode.TAKEN, id, rec[2], attempts, rec[1], rec[4] or '', rec[8] or '', rec[9] or '', typed}
    end
  end
  return {HeadCode.WAITS, '', now}
end
-- Release a scope: our lease (token-checked), its schedule, its place among the scopes with work. For an empty
-- scope, and for a paused one whatever its inbox holds (resume, worker/ops/scope_control.py, schedules it again).
local function release_scope(lease, sched, scopes, token, ref)
  if redis.call('GET', lease) == token then redis.call('DEL', lease) end
  redis.call('DEL', sched)
  redis.call('SREM', scopes, ref)
end
local function scope_of(ref)
  return string.sub(ref, (string.find(ref, '/', 1, true) or 0) + 1)
end
-- After a commit or a grant: take the next head, or park a paused scope, or release an idle one.
local function take_or_release(inbox, lease, sched, scopes, token, ref, ev_prefix, now, fence, ix)
  local head = take_head(inbox, ev_prefix, now, fence, ix, scope_of(ref))
  if head[1] == HeadCode.PAUSED or head[1] == HeadCode.EMPTY then  -- EMPTY: no head at its LINDEX just now
    release_scope(lease, sched, scopes, token, ref)
    return {HeadCode.EMPTY}
  end
  return head
end
