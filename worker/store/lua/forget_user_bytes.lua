-- FORGET_USER_BYTES: an erased user's stored-bytes count (worker/store/quotas.py) taken out of the tenant's, day by
-- day (a day's count never below zero: what the user stored before the tenant's count existed was never in it),
-- then deleted (worker/ops/erasure.py); the DEL first, since a full Redis lets a script that has written finish
-- (an HSET first would be refused). In the same step, the user's sessions (the SESSION group: those their session
-- index names) stop saying their bytes were counted for the user: ctxmeta's countedFor and a pending D-Mail's
-- countedIn that name the user's count become 'moved' (sessions/store.py MOVED, sessions/lua/lib/session.lua), so
-- a session that outlives the erasure (its scope was busy, or a session script reached it before the erasure
-- dropped it) never takes those bytes back from the tenant's count a second time (a revert, a clear, a compaction
-- or an applied D-Mail did), and keeps no key name of the user. -> the bytes the user's count held
local user_bytes, tenant_bytes = KEYS[1], KEYS[2]
local MOVED = 'moved'
local raw = redis.call('HGETALL', user_bytes)
redis.call('DEL', user_bytes)
local held = 0
for i = 1, #raw, 2 do
  local field, n = raw[i], tonumber(raw[i + 1]) or 0
  local left = (tonumber(redis.call('HGET', tenant_bytes, field)) or 0) - n
  if left > 0 then redis.call('HSET', tenant_bytes, field, left) else redis.call('HDEL', tenant_bytes, field) end
  held = held + n
end
-- countedIn is written by send.lua as cjson encodes the count's key: that text, found as it is (no re-encoding
-- of the rest of the mail), is the only unescaped occurrence of it in the JSON
local counted_in = '"countedIn":' .. cjson.encode(user_bytes)
local k = 3
while k <= #KEYS do
  local meta, dmail = KEYS[k], KEYS[k + 1]
  local SESSION_KEYS, SESSION_ARGS = 2, 0
  if redis.call('HGET', meta, 'countedFor') == user_bytes then redis.call('HSET', meta, 'countedFor', MOVED) end
  local mail = redis.call('GET', dmail)
  local at = mail and string.find(mail, counted_in, 1, true)
  if at then
    local rest = string.sub(mail, at + #counted_in)
    redis.call('SET', dmail, string.sub(mail, 1, at - 1) .. '"countedIn":"' .. MOVED .. '"' .. rest, 'KEEPTTL')
  end
  k = k + SESSION_KEYS
end
return held
