-- RENEW: extend a lease (or a lock) only while we still hold it. -> 1 extended | 0 not ours
local lease = KEYS[1]
local token, ttl_ms = ARGV[1], ARGV[2]
if redis.call('GET', lease) == token then
  return redis.call('PEXPIRE', lease, ttl_ms)
end
return 0
