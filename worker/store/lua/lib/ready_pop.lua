-- Fair share (worker/runtime/fair.py): rotate the ring and pop the next ready scope of the tenant at its tail;
-- tenants whose list ran empty leave the ring. With nothing ready the caller's ticket is retired here, atomically
-- with finding nothing. -> scope ref | false
local function ready_pop(ring, tickets, ready_prefix, ticket_ttl_ms)
  local n = redis.call('LLEN', ring)
  for _ = 1, n do
    local tenant = redis.call('RPOPLPUSH', ring, ring)
    if not tenant then break end
    local ready = ready_prefix .. tenant
    local ref = redis.call('LPOP', ready)
    if redis.call('LLEN', ready) == 0 then redis.call('LREM', ring, 0, tenant) end
    if ref then return ref end
  end
  local out = tonumber(redis.call('GET', tickets) or '0')
  if out > 1 then redis.call('SET', tickets, string.format('%d', out - 1), 'PX', ticket_ttl_ms) else redis.call('DEL', tickets) end
  return false
end
