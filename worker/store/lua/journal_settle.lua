-- JOURNAL_SETTLE: write a journal record's state (its attempt counted before a delivery, or how it ended) only while
-- the relay still holds the bucket's journal lock, and only over a record that still exists: an erasure that deleted
-- the record meanwhile must not see it written back (with no TTL), nor a relay that lost the lock overwrite the
-- result of the one that took over. done '1': the record leaves the due set; dead_at (not ''): it failed its last
-- attempt and joins the dead index at that time. -> 1 written | 0 the lock is not ours (nothing written) | -1 the
-- record is gone (its due entry dropped)
local lock, record, due, dead = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, member, record_json, done, dead_at = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if redis.call('GET', lock) ~= token then return 0 end
if not redis.call('SET', record, record_json, 'XX', 'KEEPTTL') then
  redis.call('ZREM', due, member)
  return -1
end
if done == '1' then redis.call('ZREM', due, member) end
if dead_at ~= '' then redis.call('ZADD', dead, dead_at, member) end
return 1
