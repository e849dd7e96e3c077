-- OUTBOX_FAIL: settle a record dead after its delivery, the work its deliverer handed on having failed for good
-- (worker/outbox/dead.py fail_delivered). Only while the record is as the caller read it (record_was) and, for a
-- pending one (claimed '1'), while a relay's claim on it holds: its due time ahead of Redis's clock, which set it
-- (OUTBOX_CLAIM), not the caller's. The record is written dead with the work's error (KEEPTTL), leaves the due set
-- (so the claiming relay's OUTBOX_SETTLE writes nothing) and joins the dead index at now.
-- -> 1 settled | 0 pending and not claimed (nothing written) | -1 the record changed meanwhile (nothing written)
-- requires: clock
local due, record, dead = KEYS[1], KEYS[2], KEYS[3]
local member, record_was, record_json, claimed = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if redis.call('GET', record) ~= record_was then return -1 end
local now = redis_now_ms()
if claimed == '1' then
  local score = redis.call('ZSCORE', due, member)
  if not score or tonumber(score) <= now then return 0 end
end
redis.call('SET', record, record_json, 'KEEPTTL')
redis.call('ZREM', due, member)
redis.call('ZADD', dead, now, member)
return 1
