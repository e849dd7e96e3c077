-- CLAIM: a user token's first write makes a session its user's, only if the session has no key at all (so a session
-- a key created, or another user's, is never taken over; of two racing tokens one wins). -> 1 claimed | 0 exists
local settings, user_sessions = KEYS[6], KEYS[8]  -- KEYS[1..7]: the session's keys (session_keys order)
local user_id, ttl_s, session_id = ARGV[1], ARGV[2], ARGV[3]
for i = 1, 7 do
  if redis.call('EXISTS', KEYS[i]) == 1 then return 0 end
end
redis.call('HSET', settings, 'userId', user_id)
redis.call('EXPIRE', settings, ttl_s)
redis.call('SADD', user_sessions, session_id)
redis.call('EXPIRE', user_sessions, ttl_s)
return 1
