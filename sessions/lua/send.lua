-- SEND a D-Mail: kimi's DenwaRenji.send_dmail checks, in order; the pending D-Mail is stored with the serial
-- of the checkpoint it goes back to (step end discards it if that checkpoint is gone, even if its id was made
-- again since by a clear or a compaction) and counted for the session's user until the session's TTL.
-- -> {0, seq} stored | {1, error text} | {'quota', bytes, retryAfterS} (nothing stored)
-- requires: session
local dmail_json, checkpoint_id = ARGV[5], ARGV[6]
if redis.call('EXISTS', dmail) == 1 then return done({1, 'Only one D-Mail can be sent at a time'}) end
local id = tonumber(checkpoint_id)
if id < 0 then return done({1, 'The checkpoint ID can not be negative'}) end
if id >= tonumber(redis.call('HGET', meta, 'next') or '0') then
  return done({1, 'There is no checkpoint with the given ID'})
end
local over = user_full()
if over then return done(over) end
redis.call('SET', dmail, dmail_json)
redis.call('HSET', meta, 'dmailAt', checkpoint_serial(id) or '')
if ubytes then
  redis.call('HINCRBY', ubytes, uday, #dmail_json)
  redis.call('HSET', meta, 'dmailCounted', uday .. ':' .. #dmail_json)
end
return done({0, redis.call('HINCRBY', meta, 'events', 1)})
