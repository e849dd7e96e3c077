-- CANCEL an event. Queued (or waiting for a retry): it is cancelled now and never runs (the drain pops it).
-- Processing: cancelRequested is set; the worker stops before its next action and COMMIT makes it cancelled with
-- none of its chain's staged writes (a dead worker's head is cancelled by the next take_head).
-- -> {CancelCode.CANCELLED, 'cancelled', 1} (cancelled by this call) | {CancelCode.CANCELLED, 'cancelled'}
--    (already) | {CancelCode.REQUESTED, 'processing', 1} (requested by this call) | {CancelCode.REQUESTED,
--    'processing'} (already) | {CancelCode.FINAL, state} | {CancelCode.UNKNOWN, ''}
-- requires: index, pending, history
local ev, stats, runs_active, runs_cancelled, lane_holders = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local event_id, now_ms, window_s, run_index_max, lane_ttl_s = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local state = redis.call('HGET', ev, 'state')
if not state then return {CancelCode.UNKNOWN, ''} end
if state == 'queued' then
  local ix = {stats = stats, active = runs_active, cancelled = runs_cancelled, max = tonumber(run_index_max),
    window = window_s, lane_ttl = lane_ttl_s, holders = lane_holders}
  mark_cancelled(ev, event_id, now_ms, ix)
  hflush_all()
  index_trim(now_ms, window_s)
  return {CancelCode.CANCELLED, 'cancelled', 1}
end
if state == 'processing' then
  if redis.call('HSETNX', ev, 'cancelRequested', now_ms) == 1 then return {CancelCode.REQUESTED, state, 1} end
  return {CancelCode.REQUESTED, state}
end
if state == 'cancelled' then return {CancelCode.CANCELLED, state} end
return {CancelCode.FINAL, state}
