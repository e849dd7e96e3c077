-- RENEW_SCOPE: keep a drain's scope lease (worker/drain/lease.py). Ours: extended. Gone while our fencing number
-- is still the scope's: taken again, for every grant moves the number (lib/acquire.lua, erase_hold.lua), so
-- nobody was granted the scope since ours; we were only paused past the TTL (a GC pause, a frozen VM).
-- -> 1 kept | 0 lost (another holder has it, or the scope was granted since)
local lease, fence_key = KEYS[1], KEYS[2]
local token, ttl_ms, fence = ARGV[1], ARGV[2], ARGV[3]
local held = redis.call('GET', lease)
if held == token then return redis.call('PEXPIRE', lease, ttl_ms) end
if not held and redis.call('GET', fence_key) == fence then
  redis.call('SET', lease, token, 'PX', ttl_ms)
  return 1
end
return 0
