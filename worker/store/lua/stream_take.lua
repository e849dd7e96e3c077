-- STREAM_TAKE: a slot in a tenant's open receipt streams (producers/http/streams/slots.py), unless it holds its
-- maximum; slots whose lease ended are dropped first. -> {1, 0} taken | {0, open streams} at the maximum
-- requires: clock
local streams = KEYS[1]
local member, max_streams, lease_ms = ARGV[1], ARGV[2], ARGV[3]
local now = redis_now_ms()
redis.call('ZREMRANGEBYSCORE', streams, '-inf', now)
local open = redis.call('ZCARD', streams)
if open >= tonumber(max_streams) then return {0, open} end
redis.call('ZADD', streams, now + tonumber(lease_ms), member)
redis.call('PEXPIRE', streams, lease_ms)
return {1, 0}
