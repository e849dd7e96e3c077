-- OUTBOX_SETTLE: settle a claimed outbox record, only while the claim holds (its due time is still our deadline).
-- next_due '' is done: the record leaves the due set. dead_at (not ''): it failed its last attempt and joins the
-- dead index at that time (listed and redriven by /v1/outbox). -> 1 settled | 0 the claim was lost (another relay
-- took the record; nothing written)
local due, record, dead = KEYS[1], KEYS[2], KEYS[3]
local member, deadline, record_json, next_due, dead_at = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local score = redis.call('ZSCORE', due, member)
if not score or tonumber(score) ~= tonumber(deadline) then return 0 end
redis.call('SET', record, record_json, 'KEEPTTL')
if next_due == '' then redis.call('ZREM', due, member) else redis.call('ZADD', due, 'XX', next_due, member) end
if dead_at ~= '' then redis.call('ZADD', dead, dead_at, member) end
return 1
