-- requires: index, pending, kept_lanes
-- An event's attempts, one JSON list in its hash (field history, the last 20 attempts, so it expires with the
-- event): take_head appends {attempt, run, startedAt, status: running}, a commit sets finishedAt, status
-- (succeeded | failed | cancelled) and error; an attempt that never ended (its worker died) is marked lost when
-- the next one starts. The common case, one first attempt of the first run that succeeded, is stored as its
-- start time alone (a number; it finished at the event's doneAt): 70 bytes less per retained event. The
-- history is written through lib/pending.lua as a table, so a head taken and committed in one script encodes it
-- once (or not at all, in the common case).
local MAX_HISTORY = 20
-- A history read back whole: raw is the stored text (a compact one is its start time alone), or the table a
-- history_start of this script left.
local function history_of(ek, raw)
  if not raw then return {} end
  if type(raw) == 'table' then return raw end
  local h = cjson.decode(raw)
  if type(h) == 'number' then
    hflush(ek)
    local done = tonumber(redis.call('HGET', ek, 'doneAt') or '') or h
    return {{attempt = 1, run = 0, startedAt = h, finishedAt = done, status = 'succeeded'}}
  end
  return h
end
-- -> the history (a table: pass it to history_end of the same script)
local function history_start(ek, raw, attempt, now, run)
  local h = history_of(ek, raw)
  local last = h[#h]
  if last and last['finishedAt'] == nil then last['status'] = 'lost' end
  h[#h + 1] = {attempt = attempt, run = run, startedAt = tonumber(now), status = 'running'}
  while #h > MAX_HISTORY do table.remove(h, 1) end
  hset_later(ek, 'history', h)
  return h
end
-- raw: the history as the caller knows it (history_start's table, or the stored text; false: none); nil: read it.
local function history_end(ek, now, status, err, raw)
  if raw == nil then
    hflush(ek)
    raw = redis.call('HGET', ek, 'history')
  end
  if not raw then return end
  local h = history_of(ek, raw)
  local last = h[#h]
  if not last or last['finishedAt'] ~= nil then return end
  if status == 'succeeded' and #h == 1 and last['attempt'] == 1 and last['run'] == 0 then
    -- the common case, stored as its start time alone (it finished at doneAt)
    hset_later(ek, 'history', string.format('%d', last['startedAt']))
    return
  end
  last['finishedAt'] = tonumber(now)
  last['status'] = status
  if err and err ~= '' then last['error'] = string.sub(err, 1, 1000) end
  hset_later(ek, 'history', h)
end
-- ix: {stats, active, cancelled, holders, max?}: the event never runs (again); it leaves the tenant's queued count. known:
-- what the caller read of the event ({enqueued, history, not_before}), or nil.
local function mark_cancelled(ek, id, now, ix, known)
  known = known or {}
  hset_later(ek, 'state', 'cancelled', 'cancelledAt', now)
  redis.call('EXPIRE', ek, ix.window)  -- kept, and its source id deduped, for the window from now, as a done event
  if known.not_before ~= false then hdel(ek, 'notBefore') end
  local enqueued = known.enqueued or redis.call('HGET', ek, 'enqueuedAt')
  -- scored by its enqueue time, as every status index, unless it waited longer than the window: then by now, or
  -- the window's trim would drop it at once while its record lives a window
  local late = tonumber(enqueued or '0') < tonumber(now) - tonumber(ix.window) * 1000
  index_move(ix.active, ix.cancelled, id, ek, ix.max, late and now or enqueued)
  redis.call('HINCRBY', ix.stats, 'queued', -1)
  redis.call('HINCRBY', ix.stats, 'cancelled', 1)
  history_end(ek, now, 'cancelled', '', known.history)
  -- lanes it kept (it retried, or was redriven): the TTL back (a commit's and an operator's cancel: a lane's; a
  -- head found cancelled by a lease grant, whose script has none: the window's, as the cancelled record's)
  release_lanes(ek, ix.holders, ix.lane_ttl or ix.window, known.lanes, true)  -- named for an erasure: no chain does
end
