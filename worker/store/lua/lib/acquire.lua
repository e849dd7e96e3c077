-- requires: take_head, pending, clock
-- Granting a scope lease, issuing the next fencing number, and taking the head event (ACQUIRE, POP_ACQUIRE).
-- Fencing numbers are compared for equality by every fenced write; a new (or erased, or expired: FENCE_IDLE_S
-- after its last grant) fence starts at Redis's clock in ms, above any number an earlier incarnation of this
-- scope's fence handed out, so a holder paused across an erasure can never match it. Every grant takes Redis's
-- clock when the next number would be below it: a store restored from a backup has its fences back where they
-- were, and INCR alone would hand a number out again to a new holder while a drain that began after the backup
-- still carries it (a restore walk saw such a drain's write accepted, out of order). When the inbox is empty, or the scope is paused, the lease is released
-- again in the same script. k: {lease, fence, inbox, sched, scopes, paused, stats, runs_active, runs_cancelled,
-- lane_holders, ev_prefix}; window_s: how long a head found cancelled is kept (the dedupe window).
-- -> {0, pttl} held by someone else | {fence, <take_head reply>, inbox length} granted (the length counts the
--    head: a run looks behind it only when more wait)
local function acquire(k, token, ttl_ms, now_ms, scope_ref, window_s)
  if not redis.call('SET', k.lease, token, 'NX', 'PX', ttl_ms) then
    return {0, redis.call('PTTL', k.lease)}
  end
  local fence = redis.call('INCR', k.fence)
  local clock = redis_now_ms()
  if fence < clock then
    fence = clock
    redis.call('SET', k.fence, fence, 'EX', FENCE_IDLE_S)
  else
    redis.call('EXPIRE', k.fence, FENCE_IDLE_S)  -- an idle scope's fence goes (FENCE_IDLE_S, worker/store/scripts.py)
  end
  local ix = {paused = k.paused, stats = k.stats, active = k.runs_active, cancelled = k.runs_cancelled,
    holders = k.lane_holders, window = window_s}
  local head = take_or_release(k.inbox, k.lease, k.sched, k.scopes, token, scope_ref, k.ev_prefix, now_ms,
    string.format('%d', fence), ix)
  hflush_all()
  index_flush()
  table.insert(head, 1, fence)
  head[#head + 1] = redis.call('LLEN', k.inbox)
  return head
end
