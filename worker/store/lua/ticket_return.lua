-- TICKET_RETURN: failed sends give their tickets back.
local tickets = KEYS[1]
local count = ARGV[1]
local out = tonumber(redis.call('GET', tickets) or '0') - tonumber(count)
if out > 0 then redis.call('SET', tickets, out, 'KEEPTTL') else redis.call('DEL', tickets) end
return 1
