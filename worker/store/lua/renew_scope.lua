-- RENEW_SCOPE: keep a drain's scope lease (worker/drain/lease.py). Ours: extended. Gone while our fencing number
-- is still the scope's and the inbox's head is an event we began (processing, under our fence): taken again, for
-- every grant moves the number (lib/acquire.lua, erase_hold.lua), so nobody was granted the scope since ours; we
-- were only paused past the TTL (a GC pause, a frozen VM). A scope we released ourselves (its inbox emptied, a
-- hand-off, a pause) has no such head: a renewal that lands just after the release does not lease it again.
-- -> RenewCode.RENEWED | RenewCode.TAKEN_BY_ANOTHER (another holder has it, or the scope was granted since)
--    | RenewCode.GONE (no lease and no head of ours: we released it, or it ran out with no event begun)
local lease, fence_key, inbox = KEYS[1], KEYS[2], KEYS[3]
local token, ttl_ms, fence, ev_prefix = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local held = redis.call('GET', lease)
if held == token then
  redis.call('PEXPIRE', lease, ttl_ms)
  return RenewCode.RENEWED
end
if held or redis.call('GET', fence_key) ~= fence then return RenewCode.TAKEN_BY_ANOTHER end
local head = redis.call('LINDEX', inbox, 0)
if not head then return RenewCode.GONE end
local rec = redis.call('HMGET', ev_prefix .. head, 'state', 'fence')
if rec[1] ~= 'processing' or rec[2] ~= fence then return RenewCode.GONE end
redis.call('SET', lease, token, 'PX', ttl_ms)
return RenewCode.RENEWED
