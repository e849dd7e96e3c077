-- REINDEX_LATE: an event that ended (done or dead) more than the dedupe window after it was enqueued (a paused
-- scope, a backlog) is indexed again at its end. Its indexes are scored by enqueue time and trimmed to the
-- window, so they had dropped it while it waited, though its record lives a window from its end (done) or for
-- good (dead): the runs explorer did not list it, a lookup by its source id answered 404, and erasure did not
-- find it through its user's index. Its source type's, scope's and source id's indexes (and its user's, given)
-- get it scored by now, with the window as TTL; the registry of source types notes the type. Nothing is done
-- for an event that ended within the window (the caller cannot always tell) or did not end.
-- -> 1 indexed again | 0 not late, or not ended
local ev, runs_type, runs_types, runs_scope, by_source, user_index = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5],
  KEYS[6]
local event_id, source_type, source_member, now_ms, window_s, user_id = ARGV[1], ARGV[2], ARGV[3], ARGV[4],
  ARGV[5], ARGV[6]
local rec = redis.call('HMGET', ev, 'state', 'enqueuedAt')
if rec[1] ~= 'done' and rec[1] ~= 'dead' then return 0 end
if tonumber(rec[2] or now_ms) >= tonumber(now_ms) - tonumber(window_s) * 1000 then return 0 end
for _, index in ipairs({runs_type, runs_scope}) do
  redis.call('ZADD', index, now_ms, event_id)
  redis.call('EXPIRE', index, window_s)
end
redis.call('ZADD', by_source, now_ms, source_member)
redis.call('EXPIRE', by_source, window_s)
redis.call('ZADD', runs_types, 'GT', now_ms, source_type)
if user_id ~= '' then
  redis.call('ZADD', user_index, now_ms, event_id)
  if redis.call('TTL', user_index) < tonumber(window_s) then redis.call('EXPIRE', user_index, window_s) end
end
return 1
