-- TICKET_FORCE: the reconcile sweep's own messages (worker/runtime/fair.py publish_stranded). Enough tickets that
-- `wanted` are out in all (at most `tickets_max`), for scopes the sweep found waiting on their ready lists: their
-- messages lost with a broker, or the count expired, they get as many as a push of them would have taken; and at
-- least `at_least` taken whatever the count, past the cap if need be: a count inflated by lost messages must not
-- keep the scopes waiting for its expiry. Tickets taken for the waiting give the count its TTL again, as
-- READY_PUSH's do; the forced one alone keeps the TTL the count has, so a count inflated by lost messages still
-- expires while the sweep goes on forcing. -> the number of tickets taken (that many drain_next messages to send)
local tickets = KEYS[1]
local ticket_ttl_ms, wanted, tickets_max, at_least = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local held = redis.call('GET', tickets)
local out = math.max(tonumber(held or '0'), 0)
local under = math.max(math.min(tonumber(wanted), tonumber(tickets_max)) - out, 0)
local take = math.max(under, tonumber(at_least))
if take <= 0 then return 0 end
if under > 0 or not held or redis.call('PTTL', tickets) < 0 then
  redis.call('SET', tickets, string.format('%d', out + take), 'PX', ticket_ttl_ms)
else
  redis.call('SET', tickets, string.format('%d', out + take), 'KEEPTTL')
end
return take
