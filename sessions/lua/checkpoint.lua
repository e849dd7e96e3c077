-- CHECKPOINT: a new checkpoint (and its CHECKPOINT n user message when add_message is '1').
-- -> {'ok', the new checkpoint id} | {'full', 'records'|'bytes'} | {'quota', bytes, retryAfterS, 'user'|'tenant'}
-- requires: session
local add_message = ARGV[7]
local planned = checkpoint_records(tonumber(redis.call('HGET', meta, 'next') or '0'), add_message)
local full = room(#planned, size(planned), redis.call('LLEN', ctx), stored_bytes())
if full then return done({'full', full}) end
local over = quota_full()
if over then return done(over) end
return done({'ok', checkpoint(add_message)})
