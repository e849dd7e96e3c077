-- PEEK_FRESH: the fresh events behind our head (fenced, and only while the head is the one we hold), for the
-- next run. -> {} | {id, eventJson, sourceType, sourceId, ...}
-- requires: peek
local inbox, fence_key = KEYS[1], KEYS[2]
local fence, ev_prefix, now_ms, head_id, count = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if redis.call('GET', fence_key) ~= fence or redis.call('LINDEX', inbox, 0) ~= head_id then return {} end
return peek_fresh(inbox, ev_prefix, now_ms, tonumber(count), 0)
