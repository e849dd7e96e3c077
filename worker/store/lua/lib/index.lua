-- The runs explorer's indexes (Keys.runs): zsets of event ids scored by enqueue time, one per source type (every
-- event is in exactly one: together they list every event), one per scope, one per status an event waits or
-- ends in outside done (active = queued or processing, dead, cancelled, discarded), plus the user index
-- events-of:user:U. A done event is in no status index (issue 29: an index of done events repeated the type
-- indexes' union for 130 bytes per retained event; the explorer walks the type indexes for done). The bucket's
-- registry of source types (runs:types, a zset: type -> its last admission) names the type indexes that hold
-- events of the window. Active is not trimmed at all (index_add_active): the tenant's queue limit bounds it, so a
-- backlog is listed whole, however old; a type index keeps AGENT_SIGNAL_RUN_INDEX_MAX events besides the bucket's active ones, so a
-- backlog of one type never pushes its finished events out. Adds and removes are gathered per index and
-- written when the script ends (index_flush: one ZREM and one ZADD with many members per index and script, not
-- one per event; a member's last change wins). A script that added to indexes trims each of them once before
-- it returns (index_trim, which flushes first: a batch of events pays one trim per index, not one per event) to
-- its count bound and to the dedupe window, and refreshes its TTL, so no index outgrows that bound.
local touched = {}  -- index key -> its count bound (0: the window only), for index_trim
local kept = {}  -- index key -> its TTL in seconds: not trimmed, its TTL refreshed once at the flush
local zchanges = {}  -- index key -> {member -> score, or false: removed}
local besides = {}  -- type index key -> the active index whose events it keeps besides its count bound
local rising = {}  -- index key -> true: a member's score only ever rises (ZADD GT: the registry's last admission)
local function zchange(key, member, score)
  local members = zchanges[key]
  if not members then
    members = {}
    zchanges[key] = members
  end
  members[member] = score
end
local function index_add(key, score, member, max)
  zchange(key, member, score)
  touched[key] = max or 0
end
-- The active index (queued and processing events): neither trimmed nor given a TTL. An event waits as long as it
-- must (a paused scope, a backlog: its record has no TTL either), and the tenant's queue limit bounds the index.
-- The dead index too: a dead event never expires (its record has no TTL), and the DLQ holds as many.
local persist = {}  -- active index keys: PERSIST once per script (an index written before it lost its TTL had one)
local function index_add_active(key, score, member)
  zchange(key, member, score)
  persist[key] = true
end
-- An index that is not trimmed (the user index events-of:user:U, which erasure walks whole): its TTL is set once
-- per script.
local function index_add_kept(key, score, member, ttl_s)
  zchange(key, member, score)
  kept[key] = ttl_s
end
-- An event indexed under its source type (type_index, bounded by max besides the bucket's active events), the
-- type's last admission noted in the bucket's registry.
local function index_add_typed(type_index, score, member, max, registry, source_type, active)
  index_add(type_index, score, member, max)
  besides[type_index] = active
  local pending = zchanges[registry] and zchanges[registry][source_type]
  index_add(registry, math.max(tonumber(score), tonumber(pending or score)), source_type, 0)
  rising[registry] = true  -- another process's clock behind ours never moves a type back
end
-- An event leaves a status index for none (it is done). Returns its enqueue time (read from its hash unless the
-- caller knows it; nil when its hash has none).
local function index_leave(from, id, ev, enqueued_at)
  zchange(from, id, false)
  return tonumber(enqueued_at or redis.call('HGET', ev, 'enqueuedAt') or '')
end
-- Move an event from one status index to another (score: its enqueue time). Returns the event's enqueue time.
local function index_move(from, to, id, ev, max, enqueued_at)
  local enqueued = index_leave(from, id, ev, enqueued_at)
  index_add(to, enqueued or 0, id, max)
  return enqueued
end
local function index_flush()
  for key, members in pairs(zchanges) do
    local adds, removes = {}, {}
    for member, score in pairs(members) do
      if score then
        adds[#adds + 1] = score
        adds[#adds + 1] = member
      else
        removes[#removes + 1] = member
      end
    end
    if #removes > 0 then redis.call('ZREM', key, unpack(removes)) end
    if #adds > 0 and rising[key] then
      redis.call('ZADD', key, 'GT', unpack(adds))
    elseif #adds > 0 then
      redis.call('ZADD', key, unpack(adds))
    end
  end
  zchanges = {}
  rising = {}
  for key, ttl_s in pairs(kept) do redis.call('EXPIRE', key, ttl_s) end
  kept = {}
  for key in pairs(persist) do redis.call('PERSIST', key) end
  persist = {}
end
local function index_trim(now, window)
  index_flush()
  local cutoff = '(' .. string.format('%d', tonumber(now) - tonumber(window) * 1000)
  local active_count = {}
  for key, max in pairs(touched) do
    local active = besides[key]
    if max > 0 and active then
      active_count[active] = active_count[active] or redis.call('ZCARD', active)
      max = max + active_count[active]
    end
    if max > 0 then redis.call('ZREMRANGEBYRANK', key, '0', string.format('%d', -(max + 1))) end
    redis.call('ZREMRANGEBYSCORE', key, '-inf', cutoff)
    redis.call('EXPIRE', key, window)
  end
  touched = {}
  besides = {}
end
