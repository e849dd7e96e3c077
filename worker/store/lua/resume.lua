-- RESUME a paused scope: forget the pause and, when its inbox holds events, make it active and schedule its
-- drain (unless one is scheduled already). -> {wasPaused(0|1), publish(0|1)}
local paused, inbox, scopes, sched = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local scope_key, scope_ref, sched_ttl_ms = ARGV[1], ARGV[2], ARGV[3]
local was = redis.call('HDEL', paused, scope_key)
if redis.call('LLEN', inbox) == 0 then return {was, 0} end
redis.call('SADD', scopes, scope_ref)
if redis.call('SET', sched, sched_ttl_ms, 'NX', 'PX', sched_ttl_ms) then return {was, 1} end
return {was, 0}
