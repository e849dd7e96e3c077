"""Lua for the context store and the D-Mail mailbox: every operation is one atomic script.

Context records are kimi's JSONL lines, one list item each: messages, ``{"role":"_checkpoint","id":n}`` and
``{"role":"_usage","token_count":n}``. ``ckpt`` maps a checkpoint id to its list position, the number of
messages and the bytes of records before it, so a revert is an LTRIM, not a scan.

Bounds (sessions/store.py ``SessionLimits``): every script gets the session TTL and the caps as ARGV[1..4];
a script that adds records checks the caps *before* writing anything and answers ``{'full', 'records'|'bytes'}``
instead, so concurrent appends cannot pass a cap together. A session that names a user also gets that user's
``bytes:user:<userId>`` as KEYS[9] (worker/store/quotas.py): every record added is counted there until the session's
TTL as of the write, and a script that adds records answers ``{'quota', bytes, retryAfterS}`` (nothing
written) when the user's data is already at ``AGENT_SIGNAL_USER_MAX_BYTES``. ``ctxmeta.bytes`` is the byte count of the context
records, kept by every script that changes the list. Every script ends by refreshing the TTL of all of the
session's keys (KEYS), so a session expires as a whole, ``session_ttl_s`` after its last write.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis import Redis
from redis.commands.core import Script

from worker.store.quotas import USER_BYTES_FN

__all__ = ["SessionScripts"]

# KEYS for every script: ctx, ctxmeta, ckpt, usage, dmail, then the session's other keys (settings, function
# state, the user's session index) whose TTL is refreshed with them.
# ARGV[1..4] for every script: ttlSeconds, maxRecords, maxBytes, maxUserBytes (0: none); the script's own
# arguments follow (ARGV[5]...).
LIB = (
    USER_BYTES_FN
    + """
local ctx, meta, ckpt, usage, dmail = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local ttl, max_records, max_bytes = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
-- the session's user's stored bytes (worker/store/quotas.py): KEYS[9] when the session names a user, else nil
local ubytes, max_user_bytes = KEYS[9], tonumber(ARGV[4])
local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local uday = 'd' .. math.floor((now_ms + ttl * 1000) / DAY_MS)  -- the context expires a TTL after this write
local ustale = {}  -- the user's ended days, forgotten once the script is done
local function done(reply)
  for i = 1, math.min(#KEYS, 8) do redis.call('EXPIRE', KEYS[i], ttl) end
  if ubytes then forget_fields(ubytes, ustale) end
  return reply
end
-- nil, or the reply refusing a write because the user's data is at its quota
local function user_full()
  if not ubytes or max_user_bytes <= 0 then return nil end
  local used, earliest
  used, earliest, ustale = user_bytes(ubytes, now_ms)
  if used < max_user_bytes then return nil end
  return {'quota', used, user_bytes_retry_s(earliest, now_ms)}
end
local function count_bytes()
  local n = 0
  for _, record in ipairs(redis.call('LRANGE', ctx, 0, -1)) do n = n + #record end
  return n
end
local function stored_bytes()
  local n = redis.call('HGET', meta, 'bytes')
  if n then return tonumber(n) end
  return count_bytes()  -- a session stored before the counter existed
end
local function push(record)
  redis.call('RPUSH', ctx, record)
  redis.call('HINCRBY', meta, 'bytes', #record)
  if ubytes then redis.call('HINCRBY', ubytes, uday, #record) end
end
local function room(records, bytes, base_records, base_bytes)
  if base_records + records > max_records then return 'records' end
  if base_bytes + bytes > max_bytes then return 'bytes' end
  return nil
end
local function checkpoint_records(id, add_message)
  local out = {cjson.encode({role = '_checkpoint', id = id})}
  if add_message == '1' then
    out[2] = cjson.encode({role = 'user', content = '<system>CHECKPOINT ' .. id .. '</system>'})
  end
  return out
end
local function size(records)
  local n = 0
  for _, record in ipairs(records) do n = n + #record end
  return n
end
local function checkpoint(add_message)
  local id = tonumber(redis.call('HGET', meta, 'next') or '0')
  local pos = redis.call('LLEN', ctx)
  local msgs = tonumber(redis.call('HGET', meta, 'messages') or '0')
  redis.call('HSET', meta, 'bytes', stored_bytes())
  redis.call('HSET', ckpt, id, pos .. ':' .. msgs .. ':' .. stored_bytes())
  redis.call('HSET', meta, 'next', id + 1)
  local records = checkpoint_records(id, add_message)
  for _, record in ipairs(records) do push(record) end
  redis.call('HINCRBY', meta, 'messages', #records - 1)
  return id
end
local function revert(id)
  local n = tonumber(redis.call('HGET', meta, 'next') or '0')
  if id < 0 or id >= n then return false end
  local at = {}
  for part in string.gmatch(redis.call('HGET', ckpt, id), '[^:]+') do at[#at + 1] = tonumber(part) end
  local pos, msgs, bytes = at[1], at[2], at[3]
  if pos == 0 then redis.call('DEL', ctx) else redis.call('LTRIM', ctx, 0, pos - 1) end
  for k = id, n - 1 do redis.call('HDEL', ckpt, k) end
  redis.call('ZREMRANGEBYSCORE', usage, pos, '+inf')
  local last = redis.call('ZRANGE', usage, -1, -1)
  local tokens = 0
  if last[1] then tokens = tonumber(string.sub(last[1], string.find(last[1], ':', 1, true) + 1)) end
  redis.call('HSET', meta, 'next', id, 'messages', msgs, 'tokenCount', tokens, 'bytes', bytes or count_bytes())
  return true
end
"""
)

# ARGV[5..]: messagesJson (array of already-encoded records), tokenCount ('' = none)
# -> {'ok', number of messages} | {'full', 'records'|'bytes'} | {'quota', bytes, retryAfterS} (nothing written)
APPEND = (
    LIB
    + """
local records = cjson.decode(ARGV[5])
if ARGV[6] ~= '' then
  records[#records + 1] = cjson.encode({role = '_usage', token_count = tonumber(ARGV[6])})
end
local full = room(#records, size(records), redis.call('LLEN', ctx), stored_bytes())
if full then return done({'full', full}) end
local over = user_full()
if over then return done(over) end
redis.call('HSET', meta, 'bytes', stored_bytes())
local n = #records
if ARGV[6] ~= '' then n = n - 1 end
for i = 1, n do push(records[i]) end
local total = redis.call('HINCRBY', meta, 'messages', n)
if ARGV[6] ~= '' then
  local pos = redis.call('LLEN', ctx)
  push(records[#records])
  redis.call('ZADD', usage, pos, pos .. ':' .. ARGV[6])
  redis.call('HSET', meta, 'tokenCount', ARGV[6])
end
return done({'ok', total})
"""
)

# ARGV[5]: addMessage ('1'|'0')  -> {'ok', the new checkpoint id} | {'full', 'records'|'bytes'}
CHECKPOINT = (
    LIB
    + """
local planned = checkpoint_records(tonumber(redis.call('HGET', meta, 'next') or '0'), ARGV[5])
local full = room(#planned, size(planned), redis.call('LLEN', ctx), stored_bytes())
if full then return done({'full', full}) end
local over = user_full()
if over then return done(over) end
return done({'ok', checkpoint(ARGV[5])})
"""
)

# ARGV[5]: checkpointId  -> 1 reverted | 0 no such checkpoint
REVERT = LIB + "\nif revert(tonumber(ARGV[5])) then return done(1) end\nreturn done(0)\n"

# Reset ids to 0 and drop everything (kimi's Context.clear); with ARGV[5] == '1' (compaction) create
# checkpoint 0 at once and append the compacted messages (ARGV[7], encoded records) after it; a compaction
# that would not fit the caps changes nothing.
# ARGV[5..]: compact ('1'|'0'), addMessage ('1'|'0'), messagesJson  -> {'ok', next} | {'full', what}
CLEAR = (
    LIB
    + """
local records = {}
if ARGV[5] == '1' then
  records = cjson.decode(ARGV[7])
  local planned = checkpoint_records(0, ARGV[6])
  local full = room(#planned + #records, size(planned) + size(records), 0, 0)
  if full then return done({'full', full}) end
  local over = user_full()
  if over then return done(over) end
end
redis.call('DEL', ctx, ckpt, usage)
redis.call('HSET', meta, 'next', 0, 'messages', 0, 'tokenCount', 0, 'bytes', 0)
if ARGV[5] == '1' then
  checkpoint(ARGV[6])
  for _, record in ipairs(records) do push(record) end
  redis.call('HINCRBY', meta, 'messages', #records)
end
return done({'ok', redis.call('HGET', meta, 'next')})
"""
)

# kimi's DenwaRenji.send_dmail checks, in order.  ARGV[5..]: dmailJson, checkpointId
# -> {0, seq} stored | {1, error text}
SEND = (
    LIB
    + """
if redis.call('EXISTS', dmail) == 1 then return done({1, 'Only one D-Mail can be sent at a time'}) end
local id = tonumber(ARGV[6])
if id < 0 then return done({1, 'The checkpoint ID can not be negative'}) end
if id >= tonumber(redis.call('HGET', meta, 'next') or '0') then
  return done({1, 'There is no checkpoint with the given ID'})
end
redis.call('SET', dmail, ARGV[5])
return done({0, redis.call('HINCRBY', meta, 'events', 1)})
"""
)

# End of a step. ARGV[5..]: rejectedWithoutFeedback ('1'|'0'), root ('1'|'0'), addCheckpointMessage ('1'|'0'),
# dmailMessagePrefix
# -> {'none'} | {'discarded', dmailJson, seq} | {'applied', dmailJson, seq, checkpointId, firstNewPosition}
# Applying reverts first, so the context grows past its caps by at most the one D-Mail (max_message_bytes).
STEP_END = (
    LIB
    + """
local pending = redis.call('GET', dmail)
if not pending then return done({'none'}) end
redis.call('DEL', dmail)
if ARGV[5] == '1' and ARGV[6] == '1' then
  return done({'discarded', pending, redis.call('HINCRBY', meta, 'events', 1)})
end
local mail = cjson.decode(pending)
local id = tonumber(mail.checkpoint_id)
if not revert(id) then
  return done({'discarded', pending, redis.call('HINCRBY', meta, 'events', 1)})
end
local first = redis.call('LLEN', ctx)
checkpoint(ARGV[7])
local text = ARGV[8] .. mail.text
push(cjson.encode({role = 'user', content = '<system>' .. text .. '</system>'}))
redis.call('HINCRBY', meta, 'messages', 1)
return done({'applied', pending, redis.call('HINCRBY', meta, 'events', 1), id, first})
"""
)


# A user token's first write makes a session its user's, only if the session has no key at all (so a session a
# key created, or another user's, is never taken over; of two racing tokens one wins).
# KEYS: the 7 session keys (session_keys order; settings is KEYS[6]), the user's session index
# ARGV: userId, ttlS, sessionId  -> 1 claimed | 0 the session exists
CLAIM = """
for i = 1, 7 do
  if redis.call('EXISTS', KEYS[i]) == 1 then return 0 end
end
redis.call('HSET', KEYS[6], 'userId', ARGV[1])
redis.call('EXPIRE', KEYS[6], ARGV[2])
redis.call('SADD', KEYS[8], ARGV[3])
redis.call('EXPIRE', KEYS[8], ARGV[2])
return 1
"""


@dataclass(frozen=True, slots=True)
class SessionScripts:
    claim: Script
    append: Script
    checkpoint: Script
    revert: Script
    clear: Script
    send: Script
    step_end: Script

    @classmethod
    def register(cls, client: Redis) -> SessionScripts:
        return cls(
            claim=client.register_script(CLAIM),
            append=client.register_script(APPEND),
            checkpoint=client.register_script(CHECKPOINT),
            revert=client.register_script(REVERT),
            clear=client.register_script(CLEAR),
            send=client.register_script(SEND),
            step_end=client.register_script(STEP_END),
        )
