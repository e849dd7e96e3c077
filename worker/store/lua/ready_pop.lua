-- READY_POP: the next ready scope, the tenants taking turns (lib/ready_pop.lua); with nothing ready the caller's
-- ticket is retired. -> scope ref | false
-- requires: ready_pop
local ring, tickets = KEYS[1], KEYS[2]
local ready_prefix, ticket_ttl_ms = ARGV[1], ARGV[2]
return ready_pop(ring, tickets, ready_prefix, ticket_ttl_ms)
