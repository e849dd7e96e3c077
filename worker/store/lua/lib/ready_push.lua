-- Fair share (worker/runtime/fair.py): push a ready scope, and take a drain ticket when fewer than the cap are
-- out -> 1 (send a drain_next message) | 0.
local function ready_push(ring, ready, tickets, tenant, ref, max, ttl)
  redis.call('RPUSH', ready, ref)
  if not redis.call('LPOS', ring, tenant) then redis.call('LPUSH', ring, tenant) end
  local out = tonumber(redis.call('GET', tickets) or '0')
  if out < tonumber(max) then
    redis.call('SET', tickets, string.format('%d', math.max(out, 0) + 1), 'PX', ttl)
    return 1
  end
  return 0
end
