-- COMMIT: a run of one or more head events of a scope, each committed exactly as it would be alone, in inbox
-- order, under our fence (worker/drain/commit.py).
--
-- Each event: it must still be our head (after the first, also still 'processing': the commit before it took
-- it as the next head); the lanes of the actions its chain ran, when it has any (a run whose actions waited for
-- the commit instead of applying one by one), are applied first while it is the head, our fence holds and no
-- cancel was asked for it; then its outcome: done, dead (to the DLQ), back to queued for a retry, or cancelled
-- (asked, or found: a cancel requested while it ran turns its outcome into cancelled, but for an event that
-- applied its actions one by one and is done: the cancel came during its last action, nothing was left to stop,
-- and it ends done, its chain, staged writes and follow-ups with it). Only a 'done' commit
-- applies what the chain's source and signal handlers staged (effects_json, a JSON list of command lists) and
-- admits the follow-up events they emitted (followups_json, a JSON list of Admission layouts, keys then
-- arguments): a retried, dead or cancelled event leaves no trace of them. With go_on '1' the same round trip
-- takes the next head (which begins the next event of the run), or releases the scope when it is idle or paused.
--
-- peek_count fresh events behind the new head are listed for the next run, after the first peek_skip (the caller
-- knows them already: it ran them while this commit was in flight).
--
-- -> {code, {one reply per event tried}, peek[, index, reason]}. An event's reply: {CommitCode.COMMITTED,
--    {scope refs that need a drain}, outcome, latencyMs (enqueue to done; -1 unless done), follow-ups accepted,
--    follow-ups duplicate, <take_head reply>?}
--    | {CommitCode.STALE_FENCE} (rejected and counted) | {CommitCode.NOT_HEAD} | {CommitCode.REFUSED, index,
--    reason} (a staged write refused before any write, or failed: the event is left at the head, processing, for
--    the caller to commit dead). The run's code: CommitCode.COMMITTED (peek: the fresh events behind the new
--    head) | ENDED (the run ended before event #replies+1, which is not the head now: nothing wrong) |
--    LANE_TAKEN (event #replies+1 was not committed: a lane was marked already, or its staged writes would be
--    refused: run it alone) | PARTIAL (event #replies+1: a lane's staged write failed midway, index and reason
--    follow: commit it dead) | the last reply's code (STALE_FENCE, NOT_HEAD, REFUSED).
--
-- Then the next scope (pop_next '1': a drain_next message that goes on to another scope, on one Redis with one
-- scope bucket only, where the popped scope's keys are built here as POP_ACQUIRE builds them): when the run
-- committed and released this scope (its inbox empty), the same round trip pops the next ready scope and takes
-- its lease, as POP_ACQUIRE would. A COMMITTED reply then has a fourth element: {} (nothing was ready: the
-- message's ticket is retired) | {ref} (not a scope ref) | {ref, <ACQUIRE's reply>}.
-- requires: counts, index, pending, kept_lanes, history, take_head, admit, staged, peek, pop_grant, clock
local inbox, fence_key, dlq, stats, lease, sched, scopes, series, paused, runs_active, runs_types, runs_dead,
  runs_cancelled, lane_holders = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9],
  KEYS[10], KEYS[11], KEYS[12], KEYS[13], KEYS[14]
local fence, now_ms, window_s, sched_ttl_ms, run_index_max, chain_ttl_s, token, scope_ref, ev_prefix, lane_ttl_s,
  peek_count, peek_skip, pop_next, lease_ttl_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7],
  ARGV[8], ARGV[9], ARGV[10], ARGV[11], ARGV[12], ARGV[13], ARGV[14]

local now, window, imax = tonumber(now_ms), tonumber(window_s), tonumber(run_index_max)
local body_moves = tonumber(chain_ttl_s) >= window  -- a done event's chain outlives its hash
local ix = {paused = paused, stats = stats, active = runs_active, cancelled = runs_cancelled, max = imax,
  window = window_s, lane_ttl = lane_ttl_s, holders = lane_holders}
local LANE_KEYS, LANE_ARGS = 1, 3
local at = {scopes = scopes, stats = stats, paused = paused, runs_active = runs_active, runs_types = runs_types,
  now = now_ms, window = window_s, sched_ttl = sched_ttl_ms, max = imax}

-- A JSON list as a table; '[]' (most events stage nothing and emit nothing) is not decoded: NONE, never written.
local NONE = {}
local function list_of(json)
  if json == '[]' then return NONE end
  return cjson.decode(json)
end

-- The staged writes and follow-ups of a 'done' event, checked and applied: nil, or the REFUSED reply.
local function apply_done(effects_json, followups_json)
  local staged = list_of(effects_json)
  local followups = {}
  for i, f in ipairs(list_of(followups_json)) do followups[i] = admission(f, 1, f, ADMISSION_KEYS + 1) end
  local refused = check_staged(staged)
  if refused then return nil, {CommitCode.REFUSED, refused[1], refused[2]} end
  for i, e in ipairs(followups) do
    local refusal = admit_refusal(e)
    if refusal then return nil, {CommitCode.REFUSED, #staged + i, 'WRONGTYPE: follow-up ' .. refusal} end
  end
  local broken = apply_staged(staged)
  if broken then return nil, {CommitCode.REFUSED, broken[1], broken[2]} end
  return followups, nil
end

-- The series fields of the minute of `now` ("<minute>:done", "<minute>:latency_ms"), built once per script and
-- minute: a run's events are committed in the same minute, and a string built per event is garbage per event.
local minute_seen, minute_names = nil, nil
local function minute_fields(t)
  local minute = math.floor(t / 60000)
  if minute ~= minute_seen then
    local digits = string.format('%d', minute)
    minute_seen, minute_names = minute, {digits .. ':done', digits .. ':latency_ms'}
  end
  return minute_names
end
-- The run's done events and their latency, written to the series once, after the run. The minute's first write
-- in this bucket also drops every field of a minute before the SERIES_MINUTES the Overview shows (HKEYS of at
-- most a couple of hours of fields, once a minute) and sets the hash to expire SERIES_MINUTES + 2 minutes on: a
-- soak walk saw an unread tenant's series gain two fields a minute for good (only the Overview trimmed it).
local series_done, series_latency = 0, 0
local function series_flush()
  if series_done == 0 then return end
  local done = redis.call('HINCRBY', series, minute_names[1], string.format('%d', series_done))
  redis.call('HINCRBY', series, minute_names[2], string.format('%d', series_latency))
  if done ~= series_done then return end
  local old, first = {}, minute_seen - SERIES_MINUTES
  for _, field in ipairs(redis.call('HKEYS', series)) do
    local minute = tonumber(string.match(field, '^(%d+):'))
    if minute == nil or minute < first then old[#old + 1] = field end
  end
  for i = 1, #old, 1000 do redis.call('HDEL', series, unpack(old, i, math.min(i + 999, #old))) end
  redis.call('EXPIRE', series, (SERIES_MINUTES + 2) * 60)
end

local fence_held = false  -- our fence was found in this script (nothing in it can change the fence)
local lease_kept = false  -- our lease was set again in this script (a next head was taken)
local function fence_ok()
  if not fence_held then fence_held = redis.call('GET', fence_key) == fence end
  return fence_held
end
-- What a commit needs of its event: the take_head of this script left it in `taken` (then the event is our
-- processing head, not cancelled), or one HMGET reads it (kept there until its commit) -> {enqueued, history,
-- not_before, cancel, error} | nil (not our head).
local function known_of(ev, event_id)
  local known = taken[ev]
  if known then return known end
  if redis.call('LINDEX', inbox, 0) ~= event_id then return nil end
  hflush(ev)
  local r = redis.call('HMGET', ev, 'enqueuedAt', 'history', 'notBefore', 'cancelRequested', 'error', 'lanes')
  known = {enqueued = r[1], history = r[2], not_before = r[3], cancel = r[4], error = r[5], lanes = r[6]}
  taken[ev] = known
  return known
end

-- One event's outcome (its lanes already applied): the reply as the header says. Its hash's writes go through
-- lib/pending.lua (one HSET with the take_head's fields when the event was taken in this script).
local function commit_event(ev, chain, event_id, outcome, error_text, not_before, chain_json, chain_id, go_on,
    effects_json, followups_json, kept_lanes_json, lanes_here)
  if not fence_ok() then
    -- counted where the bucket's counters are (a deleted tenant's are gone: its late drain leaves nothing)
    if redis.call('EXISTS', stats) == 1 then redis.call('HINCRBY', stats, 'fenceRejected', 1) end
    return {CommitCode.STALE_FENCE}
  end
  local known = known_of(ev, event_id)
  if not known then return {CommitCode.NOT_HEAD} end
  taken[ev] = nil
  -- A done event whose lanes are not here applied each action as it ran (APPLY listed them: `lanes`), so the
  -- cancel came during its last one. One that applied none (no action, or the cancel came before any) stops.
  if known.cancel and (outcome ~= 'done' or lanes_here or not known.lanes) then outcome = 'cancelled' end
  local followups = {}
  if outcome == 'done' then
    local refusal
    followups, refusal = apply_done(effects_json, followups_json)
    if refusal then
      taken[ev] = known  -- still our head, processing: the caller commits it dead
      return refusal
    end
  end
  if chain_json ~= '' and outcome ~= 'cancelled' then redis.call('SET', chain, chain_json, 'EX', chain_ttl_s) end
  if chain_id ~= '' then hset_later(ev, 'chainId', chain_id) end
  local publish = NONE  -- a table of its own only when a follow-up needs a drain (most events have none)
  local latency = -1
  local accepted, duplicate = 0, 0  -- its follow-ups admitted (counted as admitted by origin: follow_up)
  if outcome == 'retry' then
    keep_lanes(ev, lane_holders, known.lanes, kept_lanes_json)  -- its next run replays them, however late it comes (lib/kept_lanes.lua)
    hset_later(ev, 'state', 'queued', 'error', error_text, 'notBefore', not_before)
    count(stats, 'retried', 1)
    history_end(ev, now, 'failed', error_text, known.history)
  elseif outcome == 'cancelled' then
    redis.call('LPOP', inbox)
    mark_cancelled(ev, event_id, now_ms, ix, known)
  else
    redis.call('LPOP', inbox)
    count(stats, 'queued', -1)
    if outcome == 'done' then
      for _, e in ipairs(followups) do
        local admitted = admit(e, at)
        if admitted[1] == 1 then accepted = accepted + 1 else duplicate = duplicate + 1 end
        if admitted[2] == 1 then
          if publish == NONE then publish = {} end
          publish[#publish + 1] = e.scope_ref
        end
      end
      hset_later(ev, 'state', 'done', 'doneAt', now_ms)
      local drop = {}
      -- its body: the chain written above holds its source and outlives the hash (issue 29: ~130 bytes per
      -- retained event); worker/ops/runs.py reads it there
      if chain_json ~= '' and body_moves then drop[#drop + 1] = 'event' end
      if known.not_before then drop[#drop + 1] = 'notBefore' end
      -- a success clears the current error (a redriven event's old one stays in its attempts history)
      if known.error then drop[#drop + 1] = 'error' end
      if known.lanes then release_lanes(ev, lane_holders, lane_ttl_s, known.lanes) end  -- it retried, or was redriven
      if #drop > 0 then hdel(ev, unpack(drop)) end
      redis.call('EXPIRE', ev, window_s)
      count(stats, 'done', 1)
      local enqueued = index_leave(runs_active, event_id, ev, known.enqueued) or now  -- its type index lists it
      history_end(ev, now, 'succeeded', '', known.history)
      minute_fields(now)
      latency = now - enqueued
      series_done, series_latency = series_done + 1, series_latency + latency
    else
      -- dated by Redis's clock, not the worker's: a DLQ sweep ends at the Redis time it began (producers/sdk/
      -- dead_letters.py), so a death after it, on whichever worker, always scores after it
      local died = string.format('%d', redis_now_ms())
      hset_later(ev, 'state', 'dead', 'error', error_text, 'deadAt', died)
      redis.call('PERSIST', ev)
      keep_lanes(ev, lane_holders, known.lanes, kept_lanes_json)  -- as long as it is dead: a redrive replays them
      redis.call('ZADD', dlq, died, event_id)
      count(stats, 'dead', 1)
      -- the dead index is not trimmed by the window: a dead event never expires, and the DLQ bounds it
      index_add_active(runs_dead, index_leave(runs_active, event_id, ev, known.enqueued) or 0, event_id)
      history_end(ev, tonumber(died), 'failed', error_text, known.history)  -- its last attempt ends when it died
    end
  end
  local reply = {CommitCode.COMMITTED, publish, outcome, latency, accepted, duplicate}
  if go_on == '1' then
    local head = take_or_release(inbox, lease, sched, scopes, token, scope_ref, ev_prefix, now_ms, fence, ix)
    -- Our fence held above, and every grant moves it: the lease is ours, or it ran out while we were paused and
    -- nobody was granted the scope since. Either way it is ours again before the head it took is worked on
    -- under it (not set for a released scope: a lone event's commit pays nothing).
    if head[1] ~= HeadCode.EMPTY and not lease_kept then
      redis.call('SET', lease, token, 'PX', lease_ttl_ms)
      lease_kept = true  -- once per script: the run's next events are taken under the same lease
    end
    for _, part in ipairs(head) do reply[#reply + 1] = part end
  end
  return reply
end

-- The first `n` lanes of `lanes`, marked by this script for an event it leaves unfinished (PARTIAL, REFUSED:
-- the caller commits it dead next), listed and kept now: a worker lost before that commit would leave them with
-- their TTL and listed nowhere, and a later run after the TTL would apply them again (lib/kept_lanes.lua).
local function keep_marked(ev, known, lanes, n)
  if n == 0 then return end
  local marked = {}
  for j = 1, n do marked[j] = lanes[j].lane end
  keep_lanes(ev, lane_holders, known.lanes, cjson.encode(marked))
end

-- The lanes of an event that is our head, under our fence, not cancelled: nil applied, or why not (a code,
-- and for PARTIAL its index and reason).
local function apply_lanes(ev, event_id, lanes)
  if #lanes == 0 then return nil end
  local known = known_of(ev, event_id)
  if not known or not fence_ok() or known.cancel then return nil end
  local seen = {}
  for _, l in ipairs(lanes) do
    -- an alias: the lane's key in its other form (a payload key, worker/core/idempotency.py), in the same slot
    local aliased = l.alias ~= '' and redis.call('EXISTS', l.alias) == 1
    if seen[l.lane] or redis.call('EXISTS', l.lane) == 1 or aliased or check_staged(l.effects) then
      return {CommitCode.LANE_TAKEN}
    end
    seen[l.lane] = true
  end
  for i, l in ipairs(lanes) do
    local broken = apply_staged(l.effects)
    if broken then
      keep_marked(ev, known, lanes, i - 1)
      return {CommitCode.PARTIAL, broken[1], broken[2]}
    end
    redis.call('SET', l.lane, l.result_json, 'EX', lane_ttl_s)
  end
  return nil
end

-- The next scope's pop (before the events: the layout's group order), when asked.
local k0, a0 = 15, 15
local pop = nil
if pop_next == '1' then
  local k, a = k0, a0
  local ring, tickets = KEYS[k], KEYS[k + 1]
  local ready_prefix, ticket_ttl_ms, key_prefix, pop_token = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  local POP_KEYS, POP_ARGS = 2, 4
  pop = {ring = ring, tickets = tickets, ready_prefix = ready_prefix, ticket_ttl_ms = ticket_ttl_ms,
    key_prefix = key_prefix, token = pop_token, ttl_ms = lease_ttl_ms}
  k0, a0 = k + POP_KEYS, a + POP_ARGS
end

local function run()
  local out = {}
  local k, a = k0, a0
  while k <= #KEYS do
    local ev, chain = KEYS[k], KEYS[k + 1]
    local lane_count, event_id, outcome, error_text, not_before, chain_json, chain_id, go_on, effects_json,
      followups_json, kept_lanes_json = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5],
      ARGV[a + 6], ARGV[a + 7], ARGV[a + 8], ARGV[a + 9], ARGV[a + 10]
    k, a = k + 2, a + 11
    local lanes = {}
    for j = 1, (lane_count == '0' and 0 or tonumber(lane_count)) do
      local lane = KEYS[k]
      local result_json, lane_effects_json, lane_alias = ARGV[a], ARGV[a + 1], ARGV[a + 2]
      lanes[j] = {lane = lane, result_json = result_json, effects = list_of(lane_effects_json), alias = lane_alias}
      k, a = k + LANE_KEYS, a + LANE_ARGS
    end
    -- after the first: the event must be the head the commit before it took (then it is processing)
    if #out > 0 and not taken[ev] then return {CommitCode.ENDED, out, {}} end
    local stopped = apply_lanes(ev, event_id, lanes)
    if stopped then return {stopped[1], out, {}, stopped[2], stopped[3]} end
    local reply = commit_event(ev, chain, event_id, outcome, error_text, not_before, chain_json, chain_id, go_on,
      effects_json, followups_json, kept_lanes_json, #lanes > 0)
    if reply[1] == CommitCode.REFUSED then keep_marked(ev, taken[ev], lanes, #lanes) end  -- applied above
    out[#out + 1] = reply
    if reply[1] ~= CommitCode.COMMITTED then return {reply[1], out, {}} end
  end
  if #out > 1 then
    count(stats, 'batchCommits', 1)
    count(stats, 'batchedEvents', #out)
  end
  local last = out[#out]
  local peek = {}
  -- last[7]: the take_head reply's code, after the event's own six fields
  if last and last[7] == HeadCode.TAKEN then
    peek = peek_fresh(inbox, ev_prefix, now_ms, tonumber(peek_count), tonumber(peek_skip))
  end
  if pop and last and last[7] == HeadCode.EMPTY then
    local popped = pop_grant(pop.ring, pop.tickets, pop.ready_prefix, pop.ticket_ttl_ms, pop.key_prefix, pop.token,
      pop.ttl_ms, now_ms, window_s)
    return {CommitCode.COMMITTED, out, peek, popped or {}}
  end
  return {CommitCode.COMMITTED, out, peek}
end

local reply = run()
hflush_all()
index_trim(now_ms, window_s)
counts_flush()
series_flush()
return reply
