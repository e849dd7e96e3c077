-- REDRIVE: put a dead event back at the tail of its scope's inbox (the order decision: docs/decisions.md). Marks
-- it redriven (redrivenAt, redrives): it now runs after every event of its scope enqueued before the redrive,
-- including those enqueued after it the first time (the status record says outOfOrder). A non-empty new_body
-- replaces the stored event (an edited payload; the id and dedupe identity stay). A paused scope keeps it queued
-- without a drain until it is resumed. Its lanes stay kept (lib/kept_lanes.lua): its run replays them however long
-- it waits, and its end gives them their TTL back. -> {1, publish} requeued | {0, 0} not dead (nothing
-- done but dropping a stale DLQ entry)
-- requires: index
local ev, inbox, sched, scopes, dlq, stats, seq, paused, runs_dead, runs_active =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local event_id, scope_ref, now_ms, sched_ttl_ms, window_s, new_body, scope_key, run_index_max =
  ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]
-- An entry whose event record is gone is stale (every script that takes an event out of dead takes it out of the
-- DLQ too): dropped with its dead index entry, else an "all" sweep would meet it on every request for ever.
local state = redis.call('HGET', ev, 'state')
if not state then
  redis.call('ZREM', dlq, event_id)
  redis.call('ZREM', runs_dead, event_id)
end
if state ~= 'dead' then return {0, 0} end
redis.call('HSET', ev, 'state', 'queued', 'attempts', 0, 'redrivenAt', now_ms)
if new_body ~= '' then redis.call('HSET', ev, 'event', new_body, 'editedAt', now_ms) end
-- Later events of the scope (a higher enqueue number) have run, or wait ahead of it: it runs after them.
if tonumber(redis.call('GET', seq) or '0') > tonumber(redis.call('HGET', ev, 'seq') or '0') then
  redis.call('HSET', ev, 'outOfOrder', 1)
end
redis.call('HINCRBY', ev, 'redrives', 1)
redis.call('HDEL', ev, 'notBefore')
redis.call('ZREM', dlq, event_id)
index_add_active(runs_active, index_leave(runs_dead, event_id, ev) or 0, event_id)
index_trim(now_ms, window_s)
redis.call('RPUSH', inbox, event_id)
redis.call('HINCRBY', stats, 'redriven', 1)
redis.call('HINCRBY', stats, 'queued', 1)
if redis.call('HEXISTS', paused, scope_key) == 1 then return {1, 0} end
redis.call('SADD', scopes, scope_ref)
if redis.call('SET', sched, sched_ttl_ms, 'NX', 'PX', sched_ttl_ms) then return {1, 1} end
return {1, 0}
