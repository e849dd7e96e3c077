-- STEP_END: the end of a step, with its pending D-Mail discarded (root and rejected without feedback), applied,
-- or none. Applying reverts first, so the context grows past its caps by at most the one D-Mail.
-- -> {'none'} | {'discarded', dmailJson, seq} | {'applied', dmailJson, seq, checkpointId, firstNewPosition}
-- requires: session
local rejected_without_feedback, root, add_checkpoint_message, dmail_prefix = ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local pending = redis.call('GET', dmail)
if not pending then return done({'none'}) end
redis.call('DEL', dmail)
if rejected_without_feedback == '1' and root == '1' then
  return done({'discarded', pending, redis.call('HINCRBY', meta, 'events', 1)})
end
local mail = cjson.decode(pending)
local id = tonumber(mail.checkpoint_id)
if not revert(id) then
  return done({'discarded', pending, redis.call('HINCRBY', meta, 'events', 1)})
end
local first = redis.call('LLEN', ctx)
checkpoint(add_checkpoint_message)
local text = dmail_prefix .. mail.text
push(cjson.encode({role = 'user', content = '<system>' .. text .. '</system>'}))
redis.call('HINCRBY', meta, 'messages', 1)
return done({'applied', pending, redis.call('HINCRBY', meta, 'events', 1), id, first})
