-- STREAM_RENEW: the slots a web process holds, renewed for one more lease; a slot that vanished (a Redis restart, a
-- take that dropped it as lapsed) is added again, so every open stream stays counted. The process takes a slot out
-- of its held set before it gives it back (producers/http/streams/slots.py), so no closed stream is renewed.
-- -> how many slots were missing (added again)
-- requires: clock
local streams = KEYS[1]
local lease_ms = ARGV[1]
local until_ms = redis_now_ms() + tonumber(lease_ms)
local SLOT_KEYS, SLOT_ARGS = 0, 1
local readded = 0
for i = 2, #ARGV, SLOT_ARGS do
  local a = i
  local slot = ARGV[a]
  readded = readded + redis.call('ZADD', streams, until_ms, slot)
end
redis.call('PEXPIRE', streams, lease_ms)
return readded
