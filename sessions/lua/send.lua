-- SEND a D-Mail: kimi's DenwaRenji.send_dmail checks, in order. -> {0, seq} stored | {1, error text}
-- requires: session
local dmail_json, checkpoint_id = ARGV[5], ARGV[6]
if redis.call('EXISTS', dmail) == 1 then return done({1, 'Only one D-Mail can be sent at a time'}) end
local id = tonumber(checkpoint_id)
if id < 0 then return done({1, 'The checkpoint ID can not be negative'}) end
if id >= tonumber(redis.call('HGET', meta, 'next') or '0') then
  return done({1, 'There is no checkpoint with the given ID'})
end
redis.call('SET', dmail, dmail_json)
return done({0, redis.call('HINCRBY', meta, 'events', 1)})
