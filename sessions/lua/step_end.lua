-- STEP_END: the end of a step, with its pending D-Mail discarded (root and rejected without feedback, or its
-- checkpoint gone: reverted away, or cleared or compacted and maybe made again under the same id), applied, or
-- none. Applying reverts first, so the context grows past its caps by at most the one D-Mail. The pending
-- D-Mail's own count (send.lua) is taken back while the session's user is still the one it was counted for (its
-- text, once applied, is counted as a context record).
-- -> {'none'} | {'discarded', dmailJson, seq} | {'applied', dmailJson, seq, checkpointId, firstNewPosition}
-- requires: session
local rejected_without_feedback, root, add_checkpoint_message, dmail_prefix = ARGV[6], ARGV[7], ARGV[8], ARGV[9]
local pending = redis.call('GET', dmail)
if not pending then return done({'none'}) end
redis.call('DEL', dmail)
local mail = cjson.decode(pending)
if ubytes and mail.countedIn == ubytes and redis.call('HEXISTS', ubytes, mail.countedDay) == 1 then
  redis.call('HINCRBY', ubytes, mail.countedDay, -#pending)
end
if rejected_without_feedback == '1' and root == '1' then
  return done({'discarded', pending, redis.call('HINCRBY', meta, 'events', 1)})
end
local id = tonumber(mail.checkpoint_id)
-- a D-Mail sent before serials were kept (no at): the id alone decides, as it did then
if (mail.at ~= nil and checkpoint_serial(id) ~= mail.at) or not revert(id) then
  return done({'discarded', pending, redis.call('HINCRBY', meta, 'events', 1)})
end
local first = redis.call('LLEN', ctx)
checkpoint(add_checkpoint_message)
local text = dmail_prefix .. (mail.text or mail.message)
push(cjson.encode({role = 'user', content = '<system>' .. text .. '</system>'}))
redis.call('HINCRBY', meta, 'messages', 1)
return done({'applied', pending, redis.call('HINCRBY', meta, 'events', 1), id, first})
