-- ENQUEUE_PUSH: ENQUEUE, then each scope it made ready pushed as READY_PUSH would (worker/runtime/fair.py), in the
-- same script: one round trip for an enqueue instead of two, and no moment when a scope has its drain marker but
-- is on no ready list. Only where the store is one Redis: on a Redis Cluster the ready lists live in another slot
-- than the tenant's keys.
-- Where the broker is this Redis (drain_message is not ''), the drain_next messages of the tickets taken are
-- pushed on the broker's list here too, each with DRAIN_MARK replaced by '<drain_id>-<n>' (the message's task id
-- and delivery tag: worker/runtime/drain_message.py), and the reply counts none left to send.
-- The lease at enqueue (grant_ttl_ms above 0: one Redis, one scope bucket): when the call enqueued one event, the
-- only one in its scope's inbox, of at most GRANT_MAX_BODY_BYTES (the message carries it), its scope is the only
-- one ready and no message waits on the broker's list, the script also does the first pop of the message it
-- sends (POP_ACQUIRE's work, lib/pop_grant.lua, under grant_token), and the message carries what that pop found
-- in its DRAIN_GRANT header: {grant_token, now_ms, <POP_ACQUIRE's reply>}. Its worker then drains without a
-- round trip of its own first. Every other message's header is null.
-- -> ENQUEUE's replies (publish 0: pushed here), then the number of drain tickets taken whose messages the
--    caller sends
-- requires: enqueue, ready_push, pop_grant
local scopes, stats, paused, runs_active, runs_types, retained, dlq, ring, ready, tickets, drain_queue =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11]
local now_ms, window_s, sched_ttl_ms, tenant, max_inbox, max_queued, run_index_max, max_events, retained_slot_ms,
  user_count, retained_unit_bytes, max_user_events, user_events_count, guard_count, tickets_max, ticket_ttl_ms,
  drain_message, drain_id, ready_prefix, key_prefix, grant_token, grant_ttl_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4],
  ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11], ARGV[12], ARGV[13], ARGV[14], ARGV[15],
  ARGV[16], ARGV[17], ARGV[18], ARGV[19], ARGV[20], ARGV[21], ARGV[22]
if wrong_type(ring, 'list') or wrong_type(ready, 'list') or wrong_type(tickets, 'string')
  or (drain_message ~= '' and wrong_type(drain_queue, 'list')) then
  return redis.error_reply('REFUSED WRONGTYPE: the ready lists, the drain tickets or the broker queue')
end
local h = {scopes = scopes, stats = stats, paused = paused, runs_active = runs_active, runs_types = runs_types,
  retained = retained, dlq = dlq, now_ms = now_ms, window_s = window_s, sched_ttl_ms = sched_ttl_ms, tenant = tenant,
  max_inbox = max_inbox, max_queued = max_queued, run_index_max = run_index_max, max_events = max_events,
  retained_slot_ms = retained_slot_ms, user_count = user_count, retained_unit_bytes = retained_unit_bytes,
  max_user_events = max_user_events, user_events_count = user_events_count, guard_count = guard_count}
local events, out, refusal = enqueue(h, 12, 23)
if refusal then return refusal end
local taken = 0
for i, e in ipairs(events) do
  if out[i][1] == 1 and out[i][2] == 1 then
    taken = taken + ready_push(ring, ready, tickets, tenant, e.scope_ref, tickets_max, ticket_ttl_ms)
    out[i][2] = 0
  end
end
if taken > 0 and drain_message ~= '' then
  local grant = 'null'
  -- one event, its scope's only one (so the head the pop takes is this event), the only scope ready, nothing
  -- waiting on the broker's list, a body the message may carry
  local e = events[1]
  if grant_ttl_ms ~= '0' and #events == 1 and #e.body <= GRANT_MAX_BODY_BYTES
    and redis.call('LLEN', drain_queue) == 0 and redis.call('LLEN', ring) == 1
    and redis.call('LLEN', ready) == 1 and redis.call('LLEN', e.inbox) == 1 then
    local popped = pop_grant(ring, tickets, ready_prefix, ticket_ttl_ms, key_prefix, grant_token, grant_ttl_ms,
      now_ms, window_s)
    -- a gsub replacement reads '%' as its escape
    grant = string.gsub(cjson.encode({grant_token, tonumber(now_ms), popped}), '%%', '%%%%')
  end
  local messages = {}
  for n = 1, taken do
    local message = string.gsub(drain_message, DRAIN_MARK, drain_id .. '-' .. n)
    messages[n] = (string.gsub(message, '"' .. DRAIN_GRANT .. '"', n == 1 and grant or 'null'))
  end
  for first = 1, taken, PUSH_CHUNK do  -- Lua's unpack stops near 8,000 values: a chunk at a time
    redis.call('LPUSH', drain_queue, unpack(messages, first, math.min(first + PUSH_CHUNK - 1, taken)))
  end
  taken = 0
end
out[#out + 1] = taken
return out
