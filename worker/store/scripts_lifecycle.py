"""The Lua of an event's life: admit (with its runs-explorer indexes; the door's batch scripts are in
:mod:`worker.store.scripts_enqueue`), take the head (with its attempt record), acquire a scope, commit an outcome. :mod:`worker.store.scripts` registers them; each contract is above its script.

The shared pieces ``RUN_INDEX`` (the runs explorer's indexes) and ``HISTORY`` (attempt records) are in
:mod:`worker.store.scripts_ops`.
"""

from __future__ import annotations

from worker.store.scripts_ops import HISTORY, RUN_INDEX

__all__ = [
    "ACQUIRE",
    "ADMIT",
    "COMMIT",
    "COMMIT_BODY",
    "STAGED",
    "TAKE_HEAD",
]

# Shared Lua: admit one event: claim its dedupe record (the event hash), append it to its scope inbox and
# index it, or count a duplicate. -> {1, publish(0|1)} accepted (publish=1: no drain is scheduled for the scope,
# send one) | {0, 0} duplicate. Used by ENQUEUE_BATCH (producers) and COMMIT (follow-up events a chain emitted).
# ix: {all, active, type, scope, src, smember, paused, max, stype, sid}: the runs indexes, the source-id bucket
# and the event's member there ("<digest>:<eventId>", trimmed by the window only), the tenant's paused scopes (an event for a paused scope waits in its inbox: no drain until it is resumed).
ADMIT = """
local function wrong_type(key, want)
  local found = redis.call('TYPE', key).ok
  return found ~= 'none' and found ~= want
end
-- Checked before a script writes anything: nil, or why admitting into these keys would fail midway.
local function admit_refusal(ev, inbox, sched, seq)
  if wrong_type(ev, 'hash') then return ev .. ' is not a hash' end
  if wrong_type(inbox, 'list') then return inbox .. ' is not a list' end
  if wrong_type(sched, 'string') then return sched .. ' is not a string' end
  if wrong_type(seq, 'string') then return seq .. ' is not a string' end
  return nil
end
-- seq: the scope's enqueue counter; the event keeps its number ('seq'), so a redrive can tell whether later
-- events of its scope were enqueued after it (and so ran before it).
-- ref: the scope ref "<tenant>/<scopeKey>" (the scopes registry holds refs; the event keeps the bare key).
-- uidx/user: the user's event index (erasure and the runs explorer find a user's events there); user '' = none.
-- susers: the users whose events the scope holds (erasure drops a scope whole only when it is one user's).
local function admit(ev, inbox, sched, seq, scopes, stats, id, ref, body, now, window, sched_ttl, uidx, user,
    susers, ix)
  if redis.call('EXISTS', ev) == 1 then
    redis.call('HINCRBY', ev, 'duplicates', 1)
    count(stats, 'duplicate', 1)
    return {0, 0}
  end
  local scope = string.sub(ref, (string.find(ref, '/', 1, true) or 0) + 1)
  local t = tonumber(now)
  -- no 'eventId' field: the id is the key's suffix (readers pass it to status_record)
  redis.call('HSET', ev, 'state', 'queued', 'scopeKey', scope, 'event', body,
    'enqueuedAt', now, 'attempts', 0, 'seq', redis.call('INCR', seq), 'sourceType', ix.stype, 'sourceId', ix.sid)
  redis.call('EXPIRE', ev, window)
  redis.call('RPUSH', inbox, id)
  for _, key in ipairs({ix.all, ix.type, ix.scope}) do index_add(key, t, id, ix.max) end
  -- queued and running events: bounded by the tenant's queue limit, so a backlog is listed whole
  index_add(ix.active, t, id, 0)
  index_add(ix.src, t, ix.smember, 0)
  if user ~= '' then
    redis.call('HSET', ev, 'userId', user)
    redis.call('ZADD', uidx, now, id)
    redis.call('EXPIRE', uidx, window)
    redis.call('SADD', susers, user)
  else
    redis.call('SADD', susers, '*')  -- an event of nobody in particular: the scope is never one user's alone
  end
  count(stats, 'accepted', 1)
  count(stats, 'queued', 1)  -- the tenant's events not yet done or dead (its quota)
  if redis.call('HEXISTS', ix.paused, scope) == 1 then return {1, 0} end
  redis.call('SADD', scopes, ref)
  if redis.call('SET', sched, now, 'NX', 'PX', sched_ttl) then return {1, 1} end
  return {1, 0}
end
"""

# Shared Lua: the Redis commands handlers stage (worker.chain.context.EffectBuffer), checked before anything is
# written and applied with pcall. check_staged -> nil | {index, reason}: a command outside the allow-list or a
# key of another type than the command needs; apply_staged -> nil | {index, error} (a runtime error such as
# HINCRBY on a non-integer field: the commands before it stay applied, the caller commits nothing else).
STAGED = """
local WRITE_TYPES = {SET='string', SETNX='string', INCR='string', INCRBY='string', DECRBY='string',
  HSET='hash', HSETNX='hash', HDEL='hash', HINCRBY='hash', HINCRBYFLOAT='hash',
  RPUSH='list', LPUSH='list', LTRIM='list', LREM='list', SADD='set', SREM='set',
  ZADD='zset', ZREM='zset', ZINCRBY='zset', DEL=false, EXPIRE=false, PEXPIRE=false, PERSIST=false,
  PUBLISH=false}
local function check_staged(cmds)
  for i, cmd in ipairs(cmds) do
    local expected = WRITE_TYPES[string.upper(cmd[1])]
    if expected == nil then return {i, 'command not allowed: ' .. cmd[1]} end
    if expected then
      local found = redis.call('TYPE', cmd[2]).ok
      if found ~= 'none' and found ~= expected then
        return {i, 'WRONGTYPE: ' .. cmd[1] .. ' needs a ' .. expected .. ' but ' .. cmd[2] .. ' holds a ' .. found}
      end
    end
  end
  return nil
end
local function apply_staged(cmds)
  for i, cmd in ipairs(cmds) do
    local reply = redis.pcall(unpack(cmd))
    if type(reply) == 'table' and reply.err then
      -- a full store is not a broken write: the same call again raises its OOM error and ends the script
      if string.find(reply.err, 'OOM', 1, true) == 1 then redis.call(unpack(cmd)) end
      return {i, reply.err}
    end
  end
  return nil
end
"""

# Shared Lua: take the head of a scope's inbox for processing. Heads that are already final (done, dead,
# cancelled, discarded, erased) or whose record expired are popped and skipped; a head whose cancel was
# requested while it ran (its worker is gone) is committed cancelled and popped. ``ev_prefix`` is
# Keys.event_prefix (an event's key is the prefix followed by its id: the one key the scripts complete
# themselves, because the head's id is only known inside the script). ix: {paused, stats, active, cancelled}
# (paused nil: no pause check).  Returns {0} inbox empty | {4} the scope is paused (nothing taken) |
# {3, id, notBefore} head waits for its retry time | {1, id, eventJson, attempts, prevState, lastError,
# sourceType, sourceId} head taken (state -> processing, an attempt record started; eventJson is the stored
# form of worker/documents/event_body.py).
TAKE_HEAD = (
    RUN_INDEX
    + HISTORY
    + """
local FINAL = {done = true, dead = true, cancelled = true, discarded = true, erased = true}
local function take_head(inbox, ev_prefix, now, fence, ix, scope)
  if ix.paused and redis.call('HEXISTS', ix.paused, scope) == 1 then return {4} end
  for _ = 1, 1000 do
    local id = redis.call('LINDEX', inbox, 0)
    if not id then return {0} end
    local ek = ev_prefix .. id
    local rec = redis.call('HMGET', ek, 'state', 'event', 'notBefore', 'error', 'cancelRequested', 'history',
      'redrives', 'sourceType', 'sourceId')
    if not rec[2] or FINAL[rec[1]] then
      redis.call('LPOP', inbox)
    elseif rec[5] and ix.stats then
      redis.call('LPOP', inbox)
      mark_cancelled(ek, id, now, ix)
    else
      local nb = tonumber(rec[3] or '0') or 0
      if nb > tonumber(now) then return {3, id, tostring(nb)} end
      local attempts = redis.call('HINCRBY', ek, 'attempts', 1)
      redis.call('HSET', ek, 'state', 'processing', 'fence', fence)  -- the start time is in the history
      history_start(ek, rec[6], attempts, now, tonumber(rec[7] or '0'))
      return {1, id, rec[2], attempts, rec[1], rec[4] or '', rec[8] or '', rec[9] or ''}
    end
  end
  return {3, '', now}
end
local function release_if_idle(inbox, lease, sched, scopes, token, scope)
  if redis.call('LLEN', inbox) > 0 then return false end
  if redis.call('GET', lease) == token then redis.call('DEL', lease) end
  redis.call('DEL', sched)
  redis.call('SREM', scopes, scope)
  return true
end
-- A paused scope: release it whatever its inbox holds; resume (worker/ops/scope_control.py) schedules it again.
local function park(lease, sched, scopes, token, ref)
  if redis.call('GET', lease) == token then redis.call('DEL', lease) end
  redis.call('DEL', sched)
  redis.call('SREM', scopes, ref)
end
local function scope_of(ref)
  return string.sub(ref, (string.find(ref, '/', 1, true) or 0) + 1)
end
"""
)

# Grant the scope lease, issue the next fencing number, and take the head event, in one round trip. Fencing
# numbers are compared for equality by every fenced write; they start at Redis's clock (see below).
# KEYS: lease, fence, inbox, sched, scopes[, paused, stats, runs:status:active, runs:status:cancelled]
# ARGV: token, ttlMs, evPrefix, nowMs, scopeRef
# (worker.store.scripts.Scripts.acquire appends the tenant's keys in brackets.)
# -> {0, pttl} held by someone else | {fence, <take_head reply>, inbox length} granted (the length counts the
#    head: a batch looks behind it only when more wait); when the inbox was empty, or the scope is paused,
#    the lease is released again in the same script (reply {fence, 0, length}).
ACQUIRE = (
    TAKE_HEAD
    + """
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {0, redis.call('PTTL', KEYS[1])}
end
local fence = redis.call('INCR', KEYS[2])
if fence == 1 then
  -- A new (or erased) fence starts at Redis's clock in ms, above any number an earlier incarnation of this
  -- scope's fence handed out, so a holder paused across an erasure can never match it.
  local t = redis.call('TIME')
  fence = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('SET', KEYS[2], fence)
end
local ix = {paused = KEYS[6], stats = KEYS[7], active = KEYS[8], cancelled = KEYS[9]}
local head = take_head(KEYS[3], ARGV[3], ARGV[4], fence, ix, scope_of(ARGV[5]))
if head[1] == 4 then
  park(KEYS[1], KEYS[4], KEYS[5], ARGV[1], ARGV[5])
  head = {0}
elseif head[1] == 0 then
  release_if_idle(KEYS[3], KEYS[1], KEYS[4], KEYS[5], ARGV[1], ARGV[5])
end
table.insert(head, 1, fence)
head[#head + 1] = redis.call('LLEN', KEYS[3])
return head
"""
)

# Commit the head event's outcome (fenced): done, dead (to the DLQ), back to queued for a retry, or cancelled
# (asked by the pipeline, or found: a cancel requested while it ran turns any outcome into cancelled); then,
# when ARGV[14] is '1', go on in the same round trip: take the next head, or release the scope if it is idle
# (or paused). Only a 'done' commit applies what the chain's source and signal handlers staged: their Redis
# commands (ARGV[15], a JSON list of command lists) and the follow-up events they emitted (ARGV[16], a JSON
# list of one event's 9 keys then 7 arguments, as ENQUEUE_BATCH takes them per event). A retried, dead or cancelled event
# leaves no trace of them.
# KEYS: inbox, fence, ev, dlq, stats, chain, lease, sched, scopes, series (per-minute done count and latency),
#       paused, runs:all, runs:status:active, runs:status:done, runs:status:dead, runs:status:cancelled
# ARGV: fence, eventId, outcome, nowMs, windowS, error, notBefore, chainJson, chainTtlS, chainId,
#       token, scopeRef, evPrefix, continue, effectsJson, followupsJson, schedTtlMs, runIndexMax
# -> {-1} stale fence (rejected and counted) | {-2} the head is another event | {-3, index, reason} a staged
#    command was refused (checked before any write) or failed (see STAGED): the event is left at the head,
#    still processing, for the caller to commit dead | {1, {scopes that need a drain message}, outcome,
#    latencyMs (enqueue to done; -1 unless done), <take_head reply>?} committed (no take_head reply without continuation; {0}: inbox empty or scope
#    paused, scope released)
# COMMIT's body alone: COMMIT_BATCH (worker/store/scripts_batch.py) wraps it in a function of (KEYS, ARGV).
COMMIT_BODY = """
if redis.call('GET', KEYS[2]) ~= ARGV[1] then
  redis.call('HINCRBY', KEYS[5], 'fenceRejected', 1)
  return {-1}
end
if redis.call('LINDEX', KEYS[1], 0) ~= ARGV[2] then return {-2} end
local outcome = ARGV[3]
if redis.call('HEXISTS', KEYS[3], 'cancelRequested') == 1 then outcome = 'cancelled' end
local now, window, imax = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[18])
local ix = {paused = KEYS[11], stats = KEYS[5], active = KEYS[13], cancelled = KEYS[16], max = imax}
local followups = {}
if outcome == 'done' then
  local staged = cjson.decode(ARGV[15])
  followups = cjson.decode(ARGV[16])
  local refused = check_staged(staged)
  if refused then return {-3, refused[1], refused[2]} end
  for i, f in ipairs(followups) do
    local refusal = admit_refusal(f[1], f[2], f[3], f[4])
    if refusal then return {-3, #staged + i, 'WRONGTYPE: follow-up ' .. refusal} end
  end
  local broken = apply_staged(staged)
  if broken then return {-3, broken[1], broken[2]} end
end
if ARGV[8] ~= '' and outcome ~= 'cancelled' then redis.call('SET', KEYS[6], ARGV[8], 'EX', ARGV[9]) end
if ARGV[10] ~= '' then redis.call('HSET', KEYS[3], 'chainId', ARGV[10]) end
local publish = {}
local latency = -1
if outcome == 'retry' then
  redis.call('HSET', KEYS[3], 'state', 'queued', 'error', ARGV[6], 'notBefore', ARGV[7])
  redis.call('HINCRBY', KEYS[5], 'retried', 1)
  history_end(KEYS[3], now, 'failed', ARGV[6])
elseif outcome == 'cancelled' then
  redis.call('LPOP', KEYS[1])
  mark_cancelled(KEYS[3], ARGV[2], ARGV[4], ix)
else
  redis.call('LPOP', KEYS[1])
  count(KEYS[5], 'queued', -1)
  if outcome == 'done' then
    for _, f in ipairs(followups) do
      local fx = {all = KEYS[12], active = KEYS[13], type = f[7], scope = f[8], src = f[9], smember = f[16],
        paused = KEYS[11], max = imax, stype = f[14], sid = f[15]}
      local r = admit(f[1], f[2], f[3], f[4], KEYS[9], KEYS[5], f[10], f[11], f[12], ARGV[4], ARGV[5], ARGV[17],
        f[5], f[13], f[6], fx)
      if r[2] == 1 then table.insert(publish, f[11]) end
    end
    redis.call('HSET', KEYS[3], 'state', 'done', 'doneAt', ARGV[4])
    redis.call('HDEL', KEYS[3], 'notBefore')
    redis.call('EXPIRE', KEYS[3], ARGV[5])
    count(KEYS[5], 'done', 1)
    local enqueued = index_move(KEYS[13], KEYS[14], ARGV[2], KEYS[3], imax) or now
    history_end(KEYS[3], now, 'succeeded', '')
    local minute = math.floor(now / 60000)
    count(KEYS[10], minute .. ':done', 1)
    latency = now - enqueued
    count(KEYS[10], minute .. ':latency_ms', latency)
  else
    redis.call('HSET', KEYS[3], 'state', 'dead', 'error', ARGV[6], 'deadAt', ARGV[4])
    redis.call('PERSIST', KEYS[3])
    redis.call('ZADD', KEYS[4], ARGV[4], ARGV[2])
    count(KEYS[5], 'dead', 1)
    index_move(KEYS[13], KEYS[15], ARGV[2], KEYS[3], imax)
    history_end(KEYS[3], now, 'failed', ARGV[6])
  end
end
local reply = {1, publish, outcome, latency}
if ARGV[14] == '1' then
  local head = take_head(KEYS[1], ARGV[13], ARGV[4], tonumber(ARGV[1]), ix, scope_of(ARGV[12]))
  if head[1] == 4 then
    park(KEYS[7], KEYS[8], KEYS[9], ARGV[11], ARGV[12])
    head = {0}
  elseif head[1] == 0 then
    release_if_idle(KEYS[1], KEYS[7], KEYS[8], KEYS[9], ARGV[11], ARGV[12])
  end
  for _, part in ipairs(head) do reply[#reply + 1] = part end
end
if not BATCHED then  -- COMMIT_BATCH trims and writes the counters once, after its last event
  index_trim(ARGV[4], ARGV[5])
  counts_flush()
end
return reply
"""
COMMIT = TAKE_HEAD + ADMIT + STAGED + COMMIT_BODY
