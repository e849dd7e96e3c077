-- The idempotency lanes an unfinished event applied (the event hash's `lanes`, a JSON list of lane keys in its
-- slot). A lane expires after AGENT_SIGNAL_IDEMPOTENCY_TTL_S; an event that retries, dies (a dead event never
-- expires) or is redriven may run again later than that, and a run after its lanes had gone applied every action
-- again. So COMMIT records, for a retry or a death, the lanes its run found or marked, and they lose their TTL;
-- APPLY records each lane it marks at once (a worker lost before its commit, on the event's last attempt, leaves
-- it dead with no run to say which); the event's end gives them their TTL back (done, cancelled, discarded) or,
-- for an erasure, deletes them. A redrive keeps them as they are: its run replays them however long it waits.
local function lanes_of(json)
  if not json or json == '' then return {} end
  return cjson.decode(json)
end
-- The lanes of `before` (the hash's field) and `added` (JSON), each once, in order; and whether any is new.
local function merged_lanes(before, added)
  local out, seen = {}, {}
  for _, lane in ipairs(lanes_of(before)) do
    if not seen[lane] then seen[lane] = true; out[#out + 1] = lane end
  end
  local grew = false
  for _, lane in ipairs(lanes_of(added)) do
    if not seen[lane] then seen[lane] = true; out[#out + 1] = lane; grew = true end
  end
  return out, grew
end
-- Record `added` beside the event's lanes (`before`: the hash's field as read) and take their TTL away.
local function keep_lanes(ev, before, added)
  local lanes, grew = merged_lanes(before, added)
  if not grew then return end
  for _, lane in ipairs(lanes) do redis.call('PERSIST', lane) end
  redis.call('HSET', ev, 'lanes', cjson.encode(lanes))
end
-- One lane an APPLY just marked without a TTL, added to its event's list (those listed before were kept when
-- listed: nothing to PERSIST again).
local function list_lane(ev, lane)
  local lanes = lanes_of(redis.call('HGET', ev, 'lanes'))
  for _, listed in ipairs(lanes) do
    if listed == lane then return end
  end
  lanes[#lanes + 1] = lane
  redis.call('HSET', ev, 'lanes', cjson.encode(lanes))
end
-- An ended event's lanes (`kept`: the hash's field as read, or nil to read it) get `ttl_s` back, or are deleted
-- (ttl_s nil: an erasure); the hash forgets them.
local function release_lanes(ev, ttl_s, kept)
  if kept == nil then kept = redis.call('HGET', ev, 'lanes') end
  if not kept then return end
  for _, lane in ipairs(lanes_of(kept)) do
    if ttl_s then redis.call('EXPIRE', lane, ttl_s) else redis.call('DEL', lane) end
  end
  redis.call('HDEL', ev, 'lanes')
end
