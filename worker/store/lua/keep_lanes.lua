-- KEEP_LANES: a dead event's idempotency lanes kept as long as it is dead. A lane expires after
-- AGENT_SIGNAL_IDEMPOTENCY_TTL_S and a dead event never does, so a redrive after that applied again every action
-- that had applied before it died. The lanes its last run found or marked (lanes_json, keys of the event's scope,
-- in its slot) lose their TTL and are named in the event's hash (lanes), where REDRIVE and DISCARD give them
-- their TTL back and ERASE_SCOPE deletes them. Nothing is done unless the event is still dead.
-- -> 1 kept | 0 not dead
local ev = KEYS[1]
local lanes_json = ARGV[1]
if redis.call('HGET', ev, 'state') ~= 'dead' then return 0 end
local kept = cjson.decode(lanes_json)
local before = redis.call('HGET', ev, 'lanes')
if before then
  for _, lane in ipairs(cjson.decode(before)) do kept[#kept + 1] = lane end
end
for _, lane in ipairs(kept) do redis.call('PERSIST', lane) end
redis.call('HSET', ev, 'lanes', cjson.encode(kept))
return 1
