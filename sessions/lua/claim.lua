-- requires: user_bytes, clock
-- CLAIM: a user token's first write makes a session its user's, only if the session has no key at all (so a session
-- a key created, or another user's, is never taken over; of two racing tokens one wins), and only while the user
-- has room: a new session is refused when the user already has maxSessions sessions in their index, or when their
-- stored bytes (or the tenant's) are at the quota; its settings hash and index entry are counted as chargeBytes
-- in both until the session's TTL.
-- KEYS[1..8]: the session's keys (session_keys order, with the user's session index), the tenant's stored bytes,
-- the user's. ARGV: userId, ttlSeconds, sessionId, maxUserBytes, maxTenantBytes (0: none), maxSessions,
-- chargeBytes.
-- -> 1 claimed | 0 exists | {'quota', bytes, retryAfterS, 'user'|'tenant'} | {'sessions', count} (nothing written)
local settings, user_sessions, tbytes, ubytes = KEYS[6], KEYS[8], KEYS[9], KEYS[10]
local user_id, ttl_s, session_id = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local max_user_bytes, max_tenant_bytes = tonumber(ARGV[4]), tonumber(ARGV[5])
local max_sessions, charge = tonumber(ARGV[6]), tonumber(ARGV[7])
for i = 1, 7 do
  if redis.call('EXISTS', KEYS[i]) == 1 then return 0 end
end
local count = redis.call('SCARD', user_sessions)
if count >= max_sessions then return {'sessions', count} end
local now_ms = redis_now_ms()
local used, earliest, ustale = user_bytes(ubytes, now_ms)
if max_user_bytes > 0 and used >= max_user_bytes then
  return {'quota', used, user_bytes_retry_s(earliest, now_ms), 'user'}
end
local tused, tearliest, tstale = user_bytes(tbytes, now_ms)
if max_tenant_bytes > 0 and tused >= max_tenant_bytes then
  return {'quota', tused, user_bytes_retry_s(tearliest, now_ms), 'tenant'}
end
redis.call('HSET', settings, 'userId', user_id)
redis.call('EXPIRE', settings, ttl_s)
redis.call('SADD', user_sessions, session_id)
redis.call('EXPIRE', user_sessions, ttl_s)
local day = 'd' .. math.floor((now_ms + ttl_s * 1000) / DAY_MS)  -- the settings expire a TTL after this write
redis.call('HINCRBY', ubytes, day, charge)
redis.call('HINCRBY', tbytes, day, charge)
forget_fields(ubytes, ustale)
forget_fields(tbytes, tstale)
return 1
