-- STEP_END: the end of a step, with its pending D-Mail discarded (root and rejected without feedback, or its
-- checkpoint gone: reverted away, or cleared or compacted and maybe made again under the same id), applied, or
-- none. Applying reverts first, so the context grows past its caps by at most the one D-Mail. The pending
-- D-Mail's own count for the user is taken back (its text, once applied, is counted as a context record).
-- -> {'none'} | {'discarded', dmailJson, seq} | {'applied', dmailJson, seq, checkpointId, firstNewPosition}
-- requires: session
local rejected_without_feedback, root, add_checkpoint_message, dmail_prefix = ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local pending = redis.call('GET', dmail)
if not pending then return done({'none'}) end
redis.call('DEL', dmail)
local at, counted = unpack(redis.call('HMGET', meta, 'dmailAt', 'dmailCounted'))
redis.call('HDEL', meta, 'dmailAt', 'dmailCounted')
if ubytes and counted then
  local day, n = string.match(counted, '^([^:]+):(%d+)$')
  if day and redis.call('HEXISTS', ubytes, day) == 1 then redis.call('HINCRBY', ubytes, day, -tonumber(n)) end
end
if rejected_without_feedback == '1' and root == '1' then
  return done({'discarded', pending, redis.call('HINCRBY', meta, 'events', 1)})
end
local mail = cjson.decode(pending)
local id = tonumber(mail.checkpoint_id)
-- sent before serials were kept (at is nil): the id alone decides, as it did then
local same = at == false or at == nil or checkpoint_serial(id) == at
if not same or not revert(id) then
  return done({'discarded', pending, redis.call('HINCRBY', meta, 'events', 1)})
end
local first = redis.call('LLEN', ctx)
checkpoint(add_checkpoint_message)
local text = dmail_prefix .. (mail.text or mail.message)
push(cjson.encode({role = 'user', content = '<system>' .. text .. '</system>'}))
redis.call('HINCRBY', meta, 'messages', 1)
return done({'applied', pending, redis.call('HINCRBY', meta, 'events', 1), id, first})
