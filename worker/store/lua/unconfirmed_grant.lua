-- UNCONFIRMED_GRANT: a grant (ACQUIRE) whose replicas did not confirm it (AGENT_SIGNAL_WAIT_REPLICAS; the drain
-- does not use it: worker/drain/lease.py) is given back at once. Its lease is released (token-checked) and, while
-- the scope's fencing number is still the grant's (nobody was granted the scope since) and the event it took is
-- still processing at the attempt it counted, that attempt is uncounted and the event's state put back. Without it
-- every drain retried while a promoted primary had no replica counted a delivery, and a healthy head went dead
-- ("worker lost while processing") after MAX_ATTEMPTS of them. The write is not waited for either: on a failover
-- it goes with the grant it undoes.
-- -> 1 when the attempt was uncounted, else 0
local lease, event = KEYS[1], KEYS[2]
local token, fence, attempts, previous_state = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if redis.call('GET', lease) == token then redis.call('DEL', lease) end
local rec = redis.call('HMGET', event, 'state', 'fence', 'attempts')
if rec[1] ~= 'processing' or rec[2] ~= fence or rec[3] ~= attempts then return 0 end
redis.call('HSET', event, 'attempts', string.format('%d', tonumber(attempts) - 1), 'state', previous_state)
return 1
