-- STEP_END: the end of a step, with its pending D-Mail discarded (root and rejected without feedback; its
-- checkpoint gone: reverted away, or cleared or compacted and maybe made again under the same id; or, applied, it
-- would take the context past its caps, which send.lua checked, so only when they were lowered since), applied, or
-- none. Applying reverts first, then re-creates the checkpoint and appends the D-Mail's user message: the context
-- never passes its caps (lib/dmail_room.lua). The pending D-Mail's own count (send.lua) is taken back from the
-- tenant's count, and from the user's while the session's user is still the one it was counted for (its text,
-- once applied, is counted as a context record).
-- -> {'none'} | {'discarded', dmailJson, seq, 'rejected'|'checkpoint'|'full'}
--    | {'applied', dmailJson, seq, checkpointId, firstNewPosition, the records it appended}
-- requires: session, dmail_room
local rejected_without_feedback, root, add_checkpoint_message, dmail_prefix = ARGV[7], ARGV[8], ARGV[9],
  ARGV[10]
local pending = redis.call('GET', dmail)
if not pending then return done({'none'}) end
redis.call('DEL', dmail)
local mail = cjson.decode(pending)
-- the tenant's count is taken back with the user's, or alone for a mail of no user: a mail whose session moved
-- to another user, or whose user was erased, says countedIn 'moved' (sessions/store.py MOVED) and stays in both
-- until its day ends (an erasure of its user takes it out of the tenant's, once)
local taken_back = mail.countedIn == nil
if ubytes and mail.countedIn == ubytes and redis.call('HEXISTS', ubytes, mail.countedDay) == 1 then
  redis.call('HINCRBY', ubytes, mail.countedDay, -#pending)
  taken_back = true
end
if taken_back and mail.tenantIn == tbytes and redis.call('HEXISTS', tbytes, mail.countedDay) == 1 then
  redis.call('HINCRBY', tbytes, mail.countedDay, -#pending)
end
local function discarded(reason)
  return done({'discarded', pending, redis.call('HINCRBY', meta, 'events', 1), reason})
end
if rejected_without_feedback == '1' and root == '1' then return discarded('rejected') end
local id = tonumber(mail.checkpoint_id)
-- a D-Mail sent before serials were kept (no at): the id alone decides, as it did then
if mail.at ~= nil and checkpoint_serial(id) ~= mail.at then return discarded('checkpoint') end
local text = dmail_prefix .. (mail.text or mail.message)
local record = cjson.encode({role = 'user', content = '<system>' .. text .. '</system>'})
if applied_room(id, add_checkpoint_message, #record) then return discarded('full') end
if not revert(id) then return discarded('checkpoint') end
local first = redis.call('LLEN', ctx)
checkpoint(add_checkpoint_message)
push(record)
redis.call('HINCRBY', meta, 'messages', 1)
local appended = redis.call('LRANGE', ctx, first, -1)  -- read here: a later append is not among them
return done({'applied', pending, redis.call('HINCRBY', meta, 'events', 1), id, first, appended})
