-- OUTBOX_SETTLE: settle a claimed outbox record, only while the claim holds (its due time is still our deadline).
-- next_due '' is done: the record leaves the due set. -> 1 settled | 0 the claim was lost (another relay took the
-- record; nothing written)
local due, record = KEYS[1], KEYS[2]
local member, deadline, record_json, next_due = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local score = redis.call('ZSCORE', due, member)
if not score or tonumber(score) ~= tonumber(deadline) then return 0 end
redis.call('SET', record, record_json, 'KEEPTTL')
if next_due == '' then redis.call('ZREM', due, member) else redis.call('ZADD', due, 'XX', next_due, member) end
return 1
