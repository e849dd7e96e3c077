-- ENQUEUE: the door's batch of events, admitted whole or not at all (lib/enqueue.lua says what refuses it).
-- -> one {accepted(1|0), publish(1|0)} per event, in order
-- requires: enqueue
local scopes, stats, paused, runs_active, runs_types, retained, dlq = KEYS[1], KEYS[2], KEYS[3], KEYS[4],
  KEYS[5], KEYS[6], KEYS[7]
local now_ms, window_s, sched_ttl_ms, tenant, max_inbox, max_queued, run_index_max, max_events, retained_slot_ms,
  user_count, retained_unit_bytes, max_user_events, user_events_count, guard_count = ARGV[1], ARGV[2], ARGV[3],
  ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11], ARGV[12], ARGV[13], ARGV[14]
local h = {scopes = scopes, stats = stats, paused = paused, runs_active = runs_active, runs_types = runs_types,
  retained = retained, dlq = dlq, now_ms = now_ms, window_s = window_s, sched_ttl_ms = sched_ttl_ms, tenant = tenant,
  max_inbox = max_inbox, max_queued = max_queued, run_index_max = run_index_max, max_events = max_events,
  retained_slot_ms = retained_slot_ms, user_count = user_count, retained_unit_bytes = retained_unit_bytes,
  max_user_events = max_user_events, user_events_count = user_events_count, guard_count = guard_count}
local _, out, refusal = enqueue(h, 8, 15)
if refusal then return refusal end
return out
