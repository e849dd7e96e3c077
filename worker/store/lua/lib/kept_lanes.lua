-- A dead event's kept lanes (keep_lanes.lua) given back their TTL (ttl_s), or deleted (ttl_s nil: an erasure);
-- the event's hash forgets them.
local function release_lanes(ev, ttl_s)
  local kept = redis.call('HGET', ev, 'lanes')
  if not kept then return end
  for _, lane in ipairs(cjson.decode(kept)) do
    if ttl_s then redis.call('EXPIRE', lane, ttl_s) else redis.call('DEL', lane) end
  end
  redis.call('HDEL', ev, 'lanes')
end
