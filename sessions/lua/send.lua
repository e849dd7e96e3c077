-- SEND a D-Mail: kimi's DenwaRenji.send_dmail checks, in order. The pending D-Mail is stored with what step end
-- needs of it, in its own JSON so that it leaves with it: ``at``, the serial of the checkpoint it goes back to
-- (step end discards it if that checkpoint is gone, even if its id was made again since by a clear or a
-- compaction), and where its bytes were counted until the session's TTL (``countedIn``, the session's user's
-- count, 'moved' once the session moved to another user or its user was erased: sessions/store.py MOVED;
-- ``tenantIn``, the tenant's, and ``countedDay``: step end takes them back from the user's count when it is
-- still the session's user's, and from the tenant's). After kimi's
-- checks, a D-Mail that, applied, would take the context past its caps is refused: ``record_bytes`` is the size
-- of the user message step end appends (sessions/dmail.py applied_record_bytes), measured against the context as
-- the revert to its checkpoint leaves it (lib/dmail_room.lua).
-- -> {0, seq} stored | {1, error text} | {'full', 'records'|'bytes'}
--    | {'quota', bytes, retryAfterS, 'user'|'tenant'} (nothing stored)
-- requires: session, dmail_room
local dmail_json, checkpoint_id, record_bytes = ARGV[7], ARGV[8], ARGV[9]
if redis.call('EXISTS', dmail) == 1 then return done({1, 'Only one D-Mail can be sent at a time'}) end
local id = tonumber(checkpoint_id)
if id < 0 then return done({1, 'The checkpoint ID can not be negative'}) end
if id >= tonumber(redis.call('HGET', meta, 'next') or '0') then
  return done({1, 'There is no checkpoint with the given ID'})
end
local full = applied_room(id, '1', tonumber(record_bytes))
if full then return done({'full', full}) end
local over = quota_full()
if over then return done(over) end
-- dmail_json is a JSON object (sessions/dmail.py): its fields are spliced in before its closing brace
local extra = ',"at":' .. cjson.encode(checkpoint_serial(id) or '')
if ubytes then extra = extra .. ',"countedIn":' .. cjson.encode(ubytes) end
extra = extra .. ',"tenantIn":' .. cjson.encode(tbytes) .. ',"countedDay":' .. cjson.encode(uday)
local stored = string.sub(dmail_json, 1, -2) .. extra .. '}'
redis.call('SET', dmail, stored)
count_stored(#stored)
return done({0, redis.call('HINCRBY', meta, 'events', 1)})
