"""The Lua of operators' actions: redrive (optionally with an edited body), discard, cancel, resume a scope, and
the runs explorer's page read. :mod:`worker.store.scripts` registers them; each contract is above its script.

Shared pieces, concatenated into the scripts that use them:

* ``RUN_INDEX``: the runs explorer's indexes (``Keys.runs``): zsets of event ids scored by enqueue time, one for
  all events, one per status (``active`` = queued or processing, ``done``, ``dead``, ``cancelled``,
  ``discarded``), one per source type and one per scope, plus the user index ``events-of:user:U`` (``active``
  is not trimmed by count: the tenant's queue limit bounds it, so a backlog is listed whole). A script
  that added to indexes trims each of them once before it returns (``index_trim``: a batch of events pays one
  trim per index, not one per event) to ``AGENT_SIGNAL_RUN_INDEX_MAX`` members and to the dedupe window, and
  refreshes its TTL, so no index outgrows that bound. Written only inside the scripts that change an event's
  state: no round trip.
* ``HISTORY``: the event's attempts, one JSON list in its hash (field ``history``, the last 20 attempts, so it
  expires with the event): take_head appends ``{attempt, run, startedAt, status: running}``, COMMIT sets
  ``finishedAt``, ``status`` (succeeded | failed | cancelled) and ``error``; an attempt that never ended (its
  worker died) is marked ``lost`` when the next one starts. The common case, one first attempt of the first
  run that succeeded, is stored as its start time alone (a number; it finished at the event's ``doneAt``):
  70 bytes less per retained event.
"""

from __future__ import annotations

__all__ = ["CANCEL", "DISCARD", "HISTORY", "REDRIVE", "RESUME", "RUNS_PAGE", "RUN_INDEX"]

RUN_INDEX = """
local touched = {}  -- index key -> its count bound (0: the window only), for index_trim
local function index_add(key, score, member, max)
  redis.call('ZADD', key, score, member)
  touched[key] = max or 0
end
-- Move an event from one status index to another (score: its enqueue time).
-- Returns the event's enqueue time (nil when its hash has none).
local function index_move(from, to, id, ev, max)
  redis.call('ZREM', from, id)
  local enqueued = tonumber(redis.call('HGET', ev, 'enqueuedAt') or '')
  index_add(to, enqueued or 0, id, max)
  return enqueued
end
-- Counters (stats, series) summed in the script and written once per key and field when it ends
-- (counts_flush): a batch of events pays one HINCRBY per field, not one per event. A script whose path
-- counted must call counts_flush before it returns.
local counted = {}
local BATCHED = false  -- COMMIT_BATCH sets it: its COMMITs leave trimming and counters to it
local function count(key, field, n)
  local fields = counted[key]
  if not fields then
    fields = {}
    counted[key] = fields
  end
  fields[field] = (fields[field] or 0) + n
end
local function counts_flush()
  for key, fields in pairs(counted) do
    for field, n in pairs(fields) do redis.call('HINCRBY', key, field, n) end
  end
  counted = {}
end
local function index_trim(now, window)
  local cutoff = '(' .. string.format('%d', tonumber(now) - tonumber(window) * 1000)
  for key, max in pairs(touched) do
    if max > 0 then redis.call('ZREMRANGEBYRANK', key, 0, -(max + 1)) end
    redis.call('ZREMRANGEBYSCORE', key, '-inf', cutoff)
    redis.call('EXPIRE', key, window)
  end
  touched = {}
end
"""

HISTORY = """
local MAX_HISTORY = 20
-- A compact history (one first attempt that succeeded: its start time) read back whole.
local function history_of(ek, raw)
  if not raw then return {} end
  local h = cjson.decode(raw)
  if type(h) == 'number' then
    local done = tonumber(redis.call('HGET', ek, 'doneAt') or '') or h
    return {{attempt = 1, run = 0, startedAt = h, finishedAt = done, status = 'succeeded'}}
  end
  return h
end
local function history_start(ek, raw, attempt, now, run)
  local h = history_of(ek, raw)
  local last = h[#h]
  if last and last['finishedAt'] == nil then last['status'] = 'lost' end
  h[#h + 1] = {attempt = attempt, run = run, startedAt = tonumber(now), status = 'running'}
  while #h > MAX_HISTORY do table.remove(h, 1) end
  redis.call('HSET', ek, 'history', cjson.encode(h))
end
local function history_end(ek, now, status, err)
  local raw = redis.call('HGET', ek, 'history')
  if not raw then return end
  local h = history_of(ek, raw)
  local last = h[#h]
  if not last or last['finishedAt'] ~= nil then return end
  if status == 'succeeded' and #h == 1 and last['attempt'] == 1 and last['run'] == 0 then
    -- the common case, stored as its start time alone (it finished at doneAt)
    redis.call('HSET', ek, 'history', string.format('%d', last['startedAt']))
    return
  end
  last['finishedAt'] = tonumber(now)
  last['status'] = status
  if err and err ~= '' then last['error'] = string.sub(err, 1, 1000) end
  redis.call('HSET', ek, 'history', cjson.encode(h))
end
-- ix: {stats, active, cancelled, max?}: the event never runs (again); it leaves the tenant's queued count.
local function mark_cancelled(ek, id, now, ix)
  redis.call('HSET', ek, 'state', 'cancelled', 'cancelledAt', now)
  redis.call('HDEL', ek, 'notBefore')
  index_move(ix.active, ix.cancelled, id, ek, ix.max)
  redis.call('HINCRBY', ix.stats, 'queued', -1)
  redis.call('HINCRBY', ix.stats, 'cancelled', 1)
  history_end(ek, now, 'cancelled', '')
end
"""


# Put a dead event back at the tail of its scope's inbox (the order decision: docs/decisions.md). Marks it
# redriven (redrivenAt, redrives): it now runs after every event of its scope enqueued before the redrive,
# including those enqueued after it the first time (the status record says outOfOrder). A non-empty newBody
# replaces the stored event (an edited payload; the id and dedupe identity stay). A paused scope keeps it
# queued without a drain until it is resumed.
# KEYS: ev, inbox, sched, scopes, dlq, stats, seq, paused, runs:status:dead, runs:status:active
# ARGV: eventId, scopeRef, nowMs, schedTtlMs, windowS, newBody ('' keeps the stored one), scopeKey, runIndexMax
# -> {1, publish} requeued | {0, 0} not dead (nothing done)
REDRIVE = (
    RUN_INDEX
    + """
if redis.call('HGET', KEYS[1], 'state') ~= 'dead' then return {0, 0} end
redis.call('HSET', KEYS[1], 'state', 'queued', 'attempts', 0, 'redrivenAt', ARGV[3])
if ARGV[6] ~= '' then redis.call('HSET', KEYS[1], 'event', ARGV[6], 'editedAt', ARGV[3]) end
-- Later events of the scope (a higher enqueue number) have run, or wait ahead of it: it runs after them.
if tonumber(redis.call('GET', KEYS[7]) or '0') > tonumber(redis.call('HGET', KEYS[1], 'seq') or '0') then
  redis.call('HSET', KEYS[1], 'outOfOrder', 1)
end
redis.call('HINCRBY', KEYS[1], 'redrives', 1)
redis.call('HDEL', KEYS[1], 'notBefore')
redis.call('EXPIRE', KEYS[1], ARGV[5])
redis.call('ZREM', KEYS[5], ARGV[1])
index_move(KEYS[9], KEYS[10], ARGV[1], KEYS[1], tonumber(ARGV[8]))
index_trim(ARGV[3], ARGV[5])
redis.call('RPUSH', KEYS[2], ARGV[1])
redis.call('HINCRBY', KEYS[6], 'redriven', 1)
redis.call('HINCRBY', KEYS[6], 'queued', 1)
if redis.call('HEXISTS', KEYS[8], ARGV[7]) == 1 then return {1, 0} end
redis.call('SADD', KEYS[4], ARGV[2])
if redis.call('SET', KEYS[3], ARGV[3], 'NX', 'PX', ARGV[4]) then return {1, 1} end
return {1, 0}
"""
)

# Give up on a dead event: it leaves the DLQ and becomes an audit record (state discarded, discardReason,
# discardedAt; the hash now expires after the dedupe window), listed by discard time in runs:discarded-at
# (trimmed like the runs indexes) and written to the tenant's audit stream: event id and time, not the reason,
# which is free text that may quote the payload and stays on the event (erasure and expiry reach it there).
# KEYS: ev, dlq, stats, runs:status:dead, runs:status:discarded, runs:discarded-at, audit
# ARGV: eventId, reason, nowMs, windowS, auditMaxLen, runIndexMax   -> 1 discarded | 0 not dead (nothing done)
DISCARD = (
    RUN_INDEX
    + """
if redis.call('HGET', KEYS[1], 'state') ~= 'dead' then return 0 end
local now, window = tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('HSET', KEYS[1], 'state', 'discarded', 'discardedAt', ARGV[3], 'discardReason', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('ZREM', KEYS[2], ARGV[1])
index_move(KEYS[4], KEYS[5], ARGV[1], KEYS[1], tonumber(ARGV[6]))
index_add(KEYS[6], now, ARGV[1], tonumber(ARGV[6]))
index_trim(now, window)
redis.call('HINCRBY', KEYS[3], 'discarded', 1)
redis.call('XADD', KEYS[7], 'MAXLEN', '~', ARGV[5], '*', 'action', 'discard', 'eventId', ARGV[1], 'at', ARGV[3])
return 1
"""
)

# Cancel an event. Queued (or waiting for a retry): it is cancelled now and never runs (the drain pops it).
# Processing: cancelRequested is set; the worker stops before its next action and COMMIT makes it cancelled
# with none of its chain's staged writes (a dead worker's head is cancelled by the next take_head).
# KEYS: ev, stats, runs:status:active, runs:status:cancelled   ARGV: eventId, nowMs, windowS, runIndexMax
# -> {1, 'cancelled'} | {2, 'processing'} cancel requested | {3, state} already final | {0, ''} unknown
CANCEL = (
    RUN_INDEX
    + HISTORY
    + """
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {0, ''} end
if state == 'queued' then
  local ix = {stats = KEYS[2], active = KEYS[3], cancelled = KEYS[4], max = tonumber(ARGV[4])}
  mark_cancelled(KEYS[1], ARGV[1], ARGV[2], ix)
  index_trim(ARGV[2], ARGV[3])
  return {1, 'cancelled'}
end
if state == 'processing' then
  redis.call('HSETNX', KEYS[1], 'cancelRequested', ARGV[2])
  return {2, state}
end
if state == 'cancelled' then return {1, state} end
return {3, state}
"""
)

# Resume a paused scope: forget the pause and, when its inbox holds events, make it active and schedule its
# drain (unless one is scheduled already).
# KEYS: paused, inbox, scopes, sched   ARGV: scopeKey, scopeRef, nowMs, schedTtlMs
# -> {wasPaused(0|1), publish(0|1)}
RESUME = """
local was = redis.call('HDEL', KEYS[1], ARGV[1])
if redis.call('LLEN', KEYS[2]) == 0 then return {was, 0} end
redis.call('SADD', KEYS[3], ARGV[2])
if redis.call('SET', KEYS[4], ARGV[3], 'NX', 'PX', ARGV[4]) then return {was, 1} end
return {was, 0}
"""

# One page of a runs index, newest first: members with score <= maxScore and >= minScore, after the cursor.
# The cursor is (maxScore, member): members of that exact score at or above it (their order within one score is
# reverse lexicographic) were on earlier pages. Read-only.
# KEYS: index   ARGV: maxScore ('+inf' or ms), afterMember ('' none), minScore ('-inf' or ms), count
# -> {member, score, member, score, …}
RUNS_PAGE = """
local key, after, n = KEYS[1], ARGV[2], tonumber(ARGV[4])
local min = -math.huge
if ARGV[3] ~= '-inf' then min = tonumber(ARGV[3]) end
local max = math.huge
local start = 0
if ARGV[1] ~= '+inf' then
  max = tonumber(ARGV[1])
  start = redis.call('ZCOUNT', key, '(' .. ARGV[1], '+inf')
end
local out = {}
while #out < 2 * n do
  local page = redis.call('ZREVRANGE', key, start, start + n - 1, 'WITHSCORES')
  if #page == 0 then return out end
  for i = 1, #page, 2 do
    local score = tonumber(page[i + 1])
    if score < min then return out end
    if not (after ~= '' and score == max and page[i] >= after) then
      out[#out + 1] = page[i]
      out[#out + 1] = page[i + 1]
      if #out >= 2 * n then return out end
    end
  end
  start = start + n
end
return out
"""
