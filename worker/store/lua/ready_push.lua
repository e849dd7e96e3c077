-- READY_PUSH: make a scope ready in its tenant's turn (worker/runtime/fair.py). -> 1 send a drain_next message | 0
-- requires: ready_push
local ring, ready, tickets = KEYS[1], KEYS[2], KEYS[3]
local tenant, scope_ref, tickets_max, ticket_ttl_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
return ready_push(ring, ready, tickets, tenant, scope_ref, tickets_max, ticket_ttl_ms)
