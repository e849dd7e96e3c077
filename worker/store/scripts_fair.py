"""The Lua of fair share (worker/runtime/fair.py says how the ring of tenants, their ready lists and the drain
tickets work): push a ready scope, pop the next one, give tickets back, force one past the cap."""

from __future__ import annotations

__all__ = ["READY_POP", "READY_PUSH", "READY_PUSH_FN", "TICKET_FORCE", "TICKET_RETURN"]

# Shared Lua: push a ready scope, and take a drain ticket when fewer than the cap are out -> 1 (send a
# drain_next message) | 0. Used by READY_PUSH, and by ENQUEUE_PUSH (worker/store/scripts_lifecycle.py), which admits
# a batch and makes its scopes ready in one script where the store is one Redis.
READY_PUSH_FN = """
local function ready_push(ring, ready, tickets, tenant, ref, max, ttl)
  redis.call('RPUSH', ready, ref)
  if not redis.call('LPOS', ring, tenant) then redis.call('LPUSH', ring, tenant) end
  local out = tonumber(redis.call('GET', tickets) or '0')
  if out < tonumber(max) then
    redis.call('SET', tickets, math.max(out, 0) + 1, 'PX', ttl)
    return 1
  end
  return 0
end
"""

# KEYS: ready-tenants, ready:<tenant>, drain-tickets   ARGV: tenant, scopeRef, ticketsMax, ticketTtlMs -> 1 | 0
READY_PUSH = (
    READY_PUSH_FN + "return ready_push(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4])\n"
)

# Rotate the ring and pop the next ready scope of the tenant at its tail; tenants whose list ran empty
# leave the ring. With nothing ready the caller's ticket is retired here, atomically with finding nothing.
# KEYS: ready-tenants, drain-tickets   ARGV: the ready-list prefix (Keys.ready_prefix), ticketTtlMs -> ref | false
READY_POP = """
local n = redis.call('LLEN', KEYS[1])
for _ = 1, n do
  local tenant = redis.call('RPOPLPUSH', KEYS[1], KEYS[1])
  if not tenant then break end
  local ready = ARGV[1] .. tenant
  local ref = redis.call('LPOP', ready)
  if redis.call('LLEN', ready) == 0 then redis.call('LREM', KEYS[1], 0, tenant) end
  if ref then return ref end
end
local out = tonumber(redis.call('GET', KEYS[2]) or '0')
if out > 1 then redis.call('SET', KEYS[2], out - 1, 'PX', ARGV[2]) else redis.call('DEL', KEYS[2]) end
return false
"""

# Failed sends give their tickets back.   KEYS: drain-tickets   ARGV: how many
TICKET_RETURN = """
local out = tonumber(redis.call('GET', KEYS[1]) or '0') - tonumber(ARGV[1])
if out > 0 then redis.call('SET', KEYS[1], out, 'KEEPTTL') else redis.call('DEL', KEYS[1]) end
return 1
"""

# The sweep's own message, past the cap: a count inflated by lost messages must not keep stranded scopes
# waiting for the expiry.   KEYS: drain-tickets   ARGV: ticketTtlMs
TICKET_FORCE = """
redis.call('SET', KEYS[1], math.max(tonumber(redis.call('GET', KEYS[1]) or '0'), 0) + 1, 'PX', ARGV[1])
return 1
"""
