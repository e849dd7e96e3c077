-- SCOPE_STATES: what the operators' scope listing shows of each of one bucket's scopes (worker/ops/scope_control.py),
-- a chunk of them in one round trip: the inbox's depth, the lease's holder, the drain marker's PTTL and value, and
-- the head event's enqueuedAt and notBefore (its record is the bucket's: ev_prefix .. id). Read-only.
-- -> {depth, holder, marker_pttl, marker, enqueued_at, not_before, …}: six per probe, in order; '' for what is not
-- there (no lease, no marker, an empty inbox, a head whose record is gone)
local ev_prefix = ARGV[1]
local PROBE_KEYS, PROBE_ARGS = 3, 0
local out = {}
for k = 1, #KEYS, PROBE_KEYS do
  local inbox, lease, scheduled = KEYS[k], KEYS[k + 1], KEYS[k + 2]
  local n = #out
  out[n + 1] = redis.call('LLEN', inbox)
  out[n + 2] = redis.call('GET', lease) or ''
  out[n + 3] = redis.call('PTTL', scheduled)
  out[n + 4] = redis.call('GET', scheduled) or ''
  local enqueued_at, not_before = '', ''
  local head = redis.call('LINDEX', inbox, 0)
  if head then
    local times = redis.call('HMGET', ev_prefix .. head, 'enqueuedAt', 'notBefore')
    enqueued_at, not_before = times[1] or '', times[2] or ''
  end
  out[n + 5], out[n + 6] = enqueued_at, not_before
end
return out
