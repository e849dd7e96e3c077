-- UNCONFIRMED_GRANT: a grant (ACQUIRE or POP_ACQUIRE) whose replicas did not confirm it
-- (AGENT_SIGNAL_WAIT_REPLICAS) is given back at once by the worker that asked (worker/drain/lease.py), which
-- does not use it. Its lease is released (token-checked) and, while the event it took is still processing under
-- the grant's fence (the event's own copy of it: every grant that takes the head writes it, so nobody took the
-- head since) at the attempt it counted, that attempt is uncounted, the event's state put back and the history
-- entry the grant began dropped (a history the attempt began alone goes). An earlier attempt the grant marked
-- lost stays so: it was. Without it every drain retried while a promoted primary had no replica counted a
-- delivery, and a healthy head went dead ("worker lost while processing") after MAX_ATTEMPTS of them, its
-- history filling with attempts that never ran. The write is not waited for either: on a failover it goes with
-- the grant it undoes.
-- -> 1 when the attempt was uncounted, else 0
local lease, event = KEYS[1], KEYS[2]
local token, fence, attempts, previous_state = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if redis.call('GET', lease) == token then redis.call('DEL', lease) end
local rec = redis.call('HMGET', event, 'state', 'fence', 'attempts', 'history')
if rec[1] ~= 'processing' or rec[2] ~= fence or rec[3] ~= attempts then return 0 end
redis.call('HSET', event, 'attempts', string.format('%d', tonumber(attempts) - 1), 'state', previous_state)
local h = rec[4] and cjson.decode(rec[4])
if type(h) == 'table' then
  local last = h[#h]
  if last and last['status'] == 'running' and tonumber(last['attempt']) == tonumber(attempts) then
    table.remove(h)
    if #h == 0 then
      redis.call('HDEL', event, 'history')
    else
      redis.call('HSET', event, 'history', cjson.encode(h))
    end
  end
end
return 1
