-- Fair share (worker/runtime/fair.py): push a ready scope, and take a drain ticket when fewer than the cap are
-- out -> 1 (send a drain_next message) | 0.
-- waiting (optional): the broker's list the message would go on, where it is this Redis. While the cap's worth
-- of messages already wait there, unconsumed, no ticket is taken: the ticket count expires (ttl) while no worker
-- runs, and the door then added up to the cap again each time, so a fleet down for a day left thousands of
-- drain_next messages (about 1 KB each) for the workers to pop empty when they came back. The messages waiting
-- pop this scope as they pop every ready scope.
local function ready_push(ring, ready, tickets, tenant, ref, max, ttl, waiting)
  redis.call('RPUSH', ready, ref)
  if not redis.call('LPOS', ring, tenant) then redis.call('LPUSH', ring, tenant) end
  local out = tonumber(redis.call('GET', tickets) or '0')
  if out < tonumber(max) and not (waiting and redis.call('LLEN', waiting) >= tonumber(max)) then
    redis.call('SET', tickets, string.format('%d', math.max(out, 0) + 1), 'PX', ttl)
    return 1
  end
  return 0
end
