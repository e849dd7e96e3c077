-- The idempotency lanes an unfinished event applied (the event hash's `lanes`, a JSON list of lane keys in its
-- slot). A lane expires after AGENT_SIGNAL_IDEMPOTENCY_TTL_S; an event that retries, dies (a dead event never
-- expires) or is redriven may run again later than that, and a run after its lanes had gone applied every action
-- again. So COMMIT records, for a retry or a death, the lanes its run found or marked, and they lose their TTL;
-- APPLY records each lane it marks at once (a worker lost before its commit, on the event's last attempt, leaves
-- it dead with no run to say which); the event's end gives them their TTL back (done, cancelled, discarded) or,
-- for an erasure, deletes them. A redrive keeps them as they are: its run replays them however long it waits.
--
-- Holders: two unfinished events may list one lane (a `payload.idempotencyKey` they share: the second finds the
-- first's lane and keeps it too), and the lane must outlive both. The bucket's `lane-holders` hash (`holders`:
-- lane key -> how many unfinished events list it) counts them; an event's end gives a lane its TTL back, or
-- deletes it, only when it was the last holder. A lane listed before the count existed reads as no holder (its
-- end does what it did before), and a lane found kept without a TTL by nobody counted is taken for one such holder
-- of before (counted, so the one of before does not end it under the other). Two of before count as one.
local function lanes_of(json)
  if not json or json == '' then return {} end
  return cjson.decode(json)
end
-- One more holder of `lane`, whose PTTL is `pttl_ms` (-1 for an APPLY's own new mark: `fresh`). A lane with a
-- TTL is kept by nobody (a holder takes the TTL away, and only the last one's end gives it back), and so is one
-- an APPLY just marked (it was not there): a count found for it is stale (left by a release from before the
-- count) and starts again at one.
local function hold(holders, lane, pttl_ms, fresh)
  if fresh or pttl_ms ~= -1 then
    redis.call('HSET', holders, lane, 1)
  elseif redis.call('HINCRBY', holders, lane, 1) == 1 then
    redis.call('HINCRBY', holders, lane, 1)  -- kept without a TTL by nobody counted: an event of before the count
  end
end
-- Record `added` beside the event's lanes (`before`: the hash's field as read) and take their TTL away. A lane of
-- `added` that is not there is left out: it keeps nothing (a lane after a run's failing one was never marked; one
-- found may have expired since), and listed it would count a holder of no lane, whose end would let go of the lane
-- an APPLY of another event marks there later while that event still keeps it.
local function keep_lanes(ev, holders, before, added)
  local lanes, seen, grew = lanes_of(before), {}, false
  for _, lane in ipairs(lanes) do seen[lane] = true end
  for _, lane in ipairs(lanes_of(added)) do
    if not seen[lane] then
      seen[lane] = true
      local pttl_ms = redis.call('PTTL', lane)
      if pttl_ms ~= -2 then
        hold(holders, lane, pttl_ms, false)
        lanes[#lanes + 1] = lane
        grew = true
      end
    end
  end
  if not grew then return end
  for _, lane in ipairs(lanes) do redis.call('PERSIST', lane) end
  redis.call('HSET', ev, 'lanes', cjson.encode(lanes))
end
-- One lane an APPLY just marked without a TTL, added to its event's list (those listed before were kept when
-- listed: nothing to PERSIST again).
local function list_lane(ev, holders, lane)
  local lanes = lanes_of(redis.call('HGET', ev, 'lanes'))
  for _, listed in ipairs(lanes) do
    if listed == lane then return end
  end
  lanes[#lanes + 1] = lane
  hold(holders, lane, -1, true)
  redis.call('HSET', ev, 'lanes', cjson.encode(lanes))
end
-- An ended event's lanes (`kept`: the hash's field as read, or nil to read it) get `ttl_s` back, or are deleted
-- (ttl_s nil: an erasure), each when no other unfinished event holds it. The hash forgets them as kept; with
-- `remember`, they stay named in its `endedLanes` for an erasure (erase_ended_lanes): an event that ends
-- cancelled or discarded stores no chain, where the erasure finds a done event's lanes, and a lane key names its
-- source id (an operator race walk found them kept a week after the user's erasure). A done event's are not
-- (its chain names them: a review measured the field at +40% of a done event's hash).
-- -> the lanes deleted
local function release_lanes(ev, holders, ttl_s, kept, remember)
  if kept == nil then kept = redis.call('HGET', ev, 'lanes') end
  if not kept then return 0 end
  local deleted = 0
  for _, lane in ipairs(lanes_of(kept)) do
    if redis.call('HINCRBY', holders, lane, -1) <= 0 then
      redis.call('HDEL', holders, lane)
      if ttl_s then redis.call('EXPIRE', lane, ttl_s) else deleted = deleted + redis.call('DEL', lane) end
    end
  end
  redis.call('HDEL', ev, 'lanes')
  if remember then redis.call('HSET', ev, 'endedLanes', kept) end
  return deleted
end
-- An erased event's ended lanes (release_lanes): deleted, but any an unfinished event keeps (no TTL), as the
-- erasure's lanes read from chains are. Keys read from the hash, not declared, as release_lanes's: a lane is in
-- its event's slot (both in the scope's bucket, worker/keys/buckets.py). -> the lanes deleted
local function erase_ended_lanes(ev)
  local deleted = 0
  for _, lane in ipairs(lanes_of(redis.call('HGET', ev, 'endedLanes'))) do
    if redis.call('PTTL', lane) ~= -1 then deleted = deleted + redis.call('DEL', lane) end
  end
  return deleted
end
