-- ACQUIRE: grant the scope lease, issue the next fencing number, and take the head event, in one round trip.
-- Fencing numbers are compared for equality by every fenced write; a new (or erased) fence starts at Redis's
-- clock in ms, above any number an earlier incarnation of this scope's fence handed out, so a holder paused
-- across an erasure can never match it. When the inbox is empty, or the scope is paused, the lease is released
-- again in the same script.
-- -> {0, pttl} held by someone else | {fence, <take_head reply>, inbox length} granted (the length counts the
--    head: a run looks behind it only when more wait)
-- requires: take_head
local lease, fence_key, inbox, sched, scopes, paused, stats, runs_active, runs_cancelled =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local token, ttl_ms, ev_prefix, now_ms, scope_ref = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if not redis.call('SET', lease, token, 'NX', 'PX', ttl_ms) then
  return {0, redis.call('PTTL', lease)}
end
local fence = redis.call('INCR', fence_key)
if fence == 1 then
  local t = redis.call('TIME')
  fence = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('SET', fence_key, fence)
end
local ix = {paused = paused, stats = stats, active = runs_active, cancelled = runs_cancelled}
local head = take_or_release(inbox, lease, sched, scopes, token, scope_ref, ev_prefix, now_ms, fence, ix)
table.insert(head, 1, fence)
head[#head + 1] = redis.call('LLEN', inbox)
return head
