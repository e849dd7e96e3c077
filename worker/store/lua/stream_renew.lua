-- STREAM_RENEW: the slots a web process holds, renewed for one more lease. -> how many were still there
local streams = KEYS[1]
local lease_ms = ARGV[1]
local t = redis.call('TIME')
local until_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(lease_ms)
local SLOT_KEYS, SLOT_ARGS = 0, 1
local renewed = 0
for i = 2, #ARGV, SLOT_ARGS do
  local a = i
  local slot = ARGV[a]
  renewed = renewed + redis.call('ZADD', streams, 'XX', 'CH', until_ms, slot)
end
redis.call('PEXPIRE', streams, lease_ms)
return renewed
