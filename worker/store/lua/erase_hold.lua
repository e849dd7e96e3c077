-- ERASE_HOLD: an erasure takes a scope's lease with its own token (worker/ops/erasure.py) and holds it until it is
-- done with the scope. As ACQUIRE grants a drain the lease (lib/acquire.lua), but no head is taken: while the
-- erasure holds it no drain starts there, and the scope's fencing number moves on, so a drain whose lease ran out
-- before (a holder paused past its TTL) can no longer commit, apply a lane or stage anything in the scope. A scope
-- without a fence has had no grant to fence out: none is made (ACQUIRE starts one at Redis's clock).
-- -> {0, pttl} held by someone else (a drain runs there, or another erasure) | {1, fence (0: none)} held
-- requires: clock
local lease, fence_key = KEYS[1], KEYS[2]
local token, ttl_ms = ARGV[1], ARGV[2]
if not redis.call('SET', lease, token, 'NX', 'PX', ttl_ms) then
  return {0, redis.call('PTTL', lease)}
end
if redis.call('EXISTS', fence_key) == 0 then return {1, 0} end
-- as a grant (lib/acquire.lua): never a number below Redis's clock, which a restored store may hand out again
local fence, clock = redis.call('INCR', fence_key), redis_now_ms()
if fence < clock then
  fence = clock
  redis.call('SET', fence_key, fence, 'KEEPTTL')
end
return {1, fence}
