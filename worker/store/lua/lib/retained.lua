-- A tenant's retained events (worker/store/quotas.py), counted per slot of the dedupe window (RETAINED_SLOTS of
-- them). retained_count(key, now, slot_ms) -> events counted, the oldest counted slot (nil: none), the slots past
-- the window (to forget). retained_add(key, now, slot_ms, n, stale) counts n more in the current slot and deletes
-- the slot that just left the window and stale: after the add, so a script on a full store is still refused at
-- its first write (a delete before it would let the rest through; worker/store/server/full.py).
local function retained_count(key, now, slot_ms)
  local current = math.floor(now / slot_ms)
  local raw = redis.call('HGETALL', key)
  local total, oldest, stale = 0, nil, {}
  for i = 1, #raw, 2 do
    local slot = tonumber(raw[i])
    if slot == nil or current - slot > RETAINED_SLOTS then
      stale[#stale + 1] = raw[i]
    else
      total = total + (tonumber(raw[i + 1]) or 0)
      if oldest == nil or slot < oldest then oldest = slot end
    end
  end
  return total, oldest, stale
end
local function retained_add(key, now, slot_ms, n, stale)
  local current = math.floor(now / slot_ms)
  redis.call('HINCRBY', key, current, n)
  redis.call('HDEL', key, current - RETAINED_SLOTS - 1, unpack(stale))
  redis.call('PEXPIRE', key, (RETAINED_SLOTS + 2) * slot_ms)
end
