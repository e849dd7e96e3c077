-- ACQUIRE: grant the scope lease, issue the next fencing number, and take the head event, in one round trip
-- (lib/acquire.lua).
-- -> {0, pttl} held by someone else | {fence, <take_head reply>, inbox length} granted (the length counts the
--    head: a run looks behind it only when more wait)
-- requires: acquire
local lease, fence_key, inbox, sched, scopes, paused, stats, runs_active, runs_cancelled, lane_holders =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local token, ttl_ms, ev_prefix, now_ms, scope_ref, window_s = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local k = {lease = lease, fence = fence_key, inbox = inbox, sched = sched, scopes = scopes, paused = paused,
  stats = stats, runs_active = runs_active, runs_cancelled = runs_cancelled, lane_holders = lane_holders,
  ev_prefix = ev_prefix}
return acquire(k, token, ttl_ms, now_ms, scope_ref, window_s)
