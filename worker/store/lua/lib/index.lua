-- The runs explorer's indexes (Keys.runs): zsets of event ids scored by enqueue time, one for all events, one
-- per status (active = queued or processing, done, dead, cancelled, discarded), one per source type and one per
-- scope, plus the user index events-of:user:U (active is not trimmed by count: the tenant's queue limit bounds
-- it, so a backlog is listed whole). A script that added to indexes trims each of them once before it returns
-- (index_trim: a batch of events pays one trim per index, not one per event) to AGENT_SIGNAL_RUN_INDEX_MAX
-- members and to the dedupe window, and refreshes its TTL, so no index outgrows that bound.
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
local function index_trim(now, window)
  local cutoff = '(' .. string.format('%d', tonumber(now) - tonumber(window) * 1000)
  for key, max in pairs(touched) do
    if max > 0 then redis.call('ZREMRANGEBYRANK', key, 0, -(max + 1)) end
    redis.call('ZREMRANGEBYSCORE', key, '-inf', cutoff)
    redis.call('EXPIRE', key, window)
  end
  touched = {}
end
