-- DISCARD: give up on a dead event. It leaves the DLQ and becomes an audit record (state discarded,
-- discardReason, discardedAt; the hash now expires after the dedupe window), listed by discard time in
-- runs:discarded-at (trimmed like the runs indexes) and written to the bucket's audit stream: event id, actor
-- (the caller's credential id: worker/ops/audit.py) and time, not the reason, which is free text that may quote the payload and stays on the event (erasure and expiry reach
-- it there). Its lanes, kept while it was dead (lib/kept_lanes.lua), have their TTL again.
-- -> 1 discarded | 0 not dead (nothing done)
-- requires: index, kept_lanes
local ev, dlq, stats, runs_dead, runs_discarded, runs_discarded_at, audit, lane_holders =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local event_id, reason, now_ms, window_s, audit_max_len, run_index_max, lane_ttl_s, actor =
  ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local state = redis.call('HGET', ev, 'state')
if not state then  -- a stale DLQ entry (its record is gone): dropped with its dead index entry, as REDRIVE does
  redis.call('ZREM', dlq, event_id)
  redis.call('ZREM', runs_dead, event_id)
end
if state ~= 'dead' then return 0 end
release_lanes(ev, lane_holders, lane_ttl_s, nil, true)  -- named for an erasure: no chain does
local now, max = tonumber(now_ms), tonumber(run_index_max)
redis.call('HSET', ev, 'state', 'discarded', 'discardedAt', now_ms, 'discardReason', reason)
redis.call('EXPIRE', ev, window_s)
redis.call('ZREM', dlq, event_id)
index_move(runs_dead, runs_discarded, event_id, ev, max)
index_add(runs_discarded_at, now, event_id, max)
index_trim(now, tonumber(window_s))
redis.call('HINCRBY', stats, 'discarded', 1)
redis.call('XADD', audit, 'MAXLEN', '~', audit_max_len, '*', 'action', 'discard', 'actor', actor, 'eventId', event_id,
  'at', now_ms)
return 1
