-- POP_ACQUIRE: READY_POP and ACQUIRE in one round trip, where the store is one Redis with one scope bucket (not a
-- cluster: the scope's keys are not declared, they are built from the popped ref: lib/pop_grant.lua).
-- With nothing ready the caller's ticket is retired, as READY_POP does.
-- -> false (nothing ready) | {ref} (not a scope ref: the caller drains it the two-step way, which refuses it)
--    | {ref, <ACQUIRE's reply>}
-- requires: pop_grant
local ring, tickets = KEYS[1], KEYS[2]
local ready_prefix, ticket_ttl_ms, key_prefix, token, ttl_ms, now_ms, window_s = ARGV[1], ARGV[2], ARGV[3],
  ARGV[4], ARGV[5], ARGV[6], ARGV[7]
return pop_grant(ring, tickets, ready_prefix, ticket_ttl_ms, key_prefix, token, ttl_ms, now_ms, window_s)
