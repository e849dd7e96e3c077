-- TICKET_FORCE: the sweep's own message, past the cap: a count inflated by lost messages must not keep stranded
-- scopes waiting for the expiry.
local tickets = KEYS[1]
local ticket_ttl_ms = ARGV[1]
redis.call('SET', tickets, math.max(tonumber(redis.call('GET', tickets) or '0'), 0) + 1, 'PX', ticket_ttl_ms)
return 1
