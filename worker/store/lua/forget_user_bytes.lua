-- FORGET_USER_BYTES: an erased user's stored-bytes count (worker/store/quotas.py) taken out of the tenant's, day by
-- day (a day's count never below zero: what the user stored before the tenant's count existed was never in it),
-- then deleted (worker/ops/erasure.py); the DEL first, since a full Redis lets a script that has written finish
-- (an HSET first would be refused). -> the bytes the user's count held
local user_bytes, tenant_bytes = KEYS[1], KEYS[2]
local raw = redis.call('HGETALL', user_bytes)
redis.call('DEL', user_bytes)
local held = 0
for i = 1, #raw, 2 do
  local field, n = raw[i], tonumber(raw[i + 1]) or 0
  local left = (tonumber(redis.call('HGET', tenant_bytes, field)) or 0) - n
  if left > 0 then redis.call('HSET', tenant_bytes, field, left) else redis.call('HDEL', tenant_bytes, field) end
  held = held + n
end
return held
