-- OUTBOX_CLAIM: claim the next outbox record due now (Redis's clock): its due time moves one lease ahead, and that
-- deadline is the claim (a relay that dies leaves it due again when the lease runs out).
-- -> {} nothing due | {member, deadline}
-- requires: clock
local due = KEYS[1]
local lease_ms = ARGV[1]
local now = redis_now_ms()
local first = redis.call('ZRANGEBYSCORE', due, '-inf', now, 'LIMIT', 0, 1)
if #first == 0 then return {} end
local deadline = now + tonumber(lease_ms)
redis.call('ZADD', due, 'XX', deadline, first[1])
return {first[1], deadline}
