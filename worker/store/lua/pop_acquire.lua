-- POP_ACQUIRE: READY_POP and ACQUIRE in one round trip, where the store is one Redis with one scope bucket (not a
-- cluster: the scope's keys are not declared, they are built here from the popped ref, lib/scope_keys.lua).
-- With nothing ready the caller's ticket is retired, as READY_POP does.
-- -> false (nothing ready) | {ref} (not a scope ref: the caller drains it the two-step way, which refuses it)
--    | {ref, <ACQUIRE's reply>}
-- requires: ready_pop, scope_keys, acquire
local ring, tickets = KEYS[1], KEYS[2]
local ready_prefix, ticket_ttl_ms, key_prefix, token, ttl_ms, now_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4],
  ARGV[5], ARGV[6]
local ref = ready_pop(ring, tickets, ready_prefix, ticket_ttl_ms)
if not ref then return false end
local slash = string.find(ref, '/', 1, true)
if not slash or slash == 1 or slash == #ref then return {ref} end
local k = scope_keys(key_prefix, string.sub(ref, 1, slash - 1), string.sub(ref, slash + 1))
return {ref, acquire(k, token, ttl_ms, now_ms, ref)}
