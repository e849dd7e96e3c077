"""Lua for the context store and the D-Mail mailbox: every operation is one atomic script.

Context records are kimi's JSONL lines, one list item each: messages, ``{"role":"_checkpoint","id":n}`` and
``{"role":"_usage","token_count":n}``. ``ckpt`` maps a checkpoint id to its list position and the number of
messages before it, so a revert is an LTRIM, not a scan.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis import Redis
from redis.commands.core import Script

__all__ = ["SessionScripts"]

# KEYS for every script: ctx, ctxmeta, ckpt, usage, dmail
LIB = """
local ctx, meta, ckpt, usage, dmail = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local function checkpoint(add_message)
  local id = tonumber(redis.call('HGET', meta, 'next') or '0')
  local pos = redis.call('LLEN', ctx)
  local msgs = tonumber(redis.call('HGET', meta, 'messages') or '0')
  redis.call('RPUSH', ctx, cjson.encode({role = '_checkpoint', id = id}))
  redis.call('HSET', ckpt, id, pos .. ':' .. msgs)
  redis.call('HSET', meta, 'next', id + 1)
  if add_message == '1' then
    redis.call('RPUSH', ctx, cjson.encode({role = 'user', content = '<system>CHECKPOINT ' .. id .. '</system>'}))
    redis.call('HINCRBY', meta, 'messages', 1)
  end
  return id
end
local function revert(id)
  local n = tonumber(redis.call('HGET', meta, 'next') or '0')
  if id < 0 or id >= n then return false end
  local at = redis.call('HGET', ckpt, id)
  local sep = string.find(at, ':', 1, true)
  local pos = tonumber(string.sub(at, 1, sep - 1))
  local msgs = tonumber(string.sub(at, sep + 1))
  if pos == 0 then redis.call('DEL', ctx) else redis.call('LTRIM', ctx, 0, pos - 1) end
  for k = id, n - 1 do redis.call('HDEL', ckpt, k) end
  redis.call('ZREMRANGEBYSCORE', usage, pos, '+inf')
  local last = redis.call('ZRANGE', usage, -1, -1)
  local tokens = 0
  if last[1] then tokens = tonumber(string.sub(last[1], string.find(last[1], ':', 1, true) + 1)) end
  redis.call('HSET', meta, 'next', id, 'messages', msgs, 'tokenCount', tokens)
  return true
end
"""

# ARGV: messagesJson (array of already-encoded records), tokenCount ('' = none)  -> number of messages
APPEND = (
    LIB
    + """
local records = cjson.decode(ARGV[1])
for _, record in ipairs(records) do redis.call('RPUSH', ctx, record) end
local total = redis.call('HINCRBY', meta, 'messages', #records)
if ARGV[2] ~= '' then
  local pos = redis.call('LLEN', ctx)
  redis.call('RPUSH', ctx, cjson.encode({role = '_usage', token_count = tonumber(ARGV[2])}))
  redis.call('ZADD', usage, pos, pos .. ':' .. ARGV[2])
  redis.call('HSET', meta, 'tokenCount', ARGV[2])
end
return total
"""
)

# ARGV: addMessage ('1'|'0')  -> the new checkpoint id
CHECKPOINT = LIB + "\nreturn checkpoint(ARGV[1])\n"

# ARGV: checkpointId  -> 1 reverted | 0 no such checkpoint
REVERT = LIB + "\nif revert(tonumber(ARGV[1])) then return 1 end\nreturn 0\n"

# Reset ids to 0 and drop everything (kimi's Context.clear); with ARGV[1] == '1' (compaction) create
# checkpoint 0 at once and append the compacted messages (ARGV[3], encoded records) after it.
# ARGV: compact ('1'|'0'), addMessage ('1'|'0'), messagesJson
CLEAR = (
    LIB
    + """
redis.call('DEL', ctx, ckpt, usage)
redis.call('HSET', meta, 'next', 0, 'messages', 0, 'tokenCount', 0)
if ARGV[1] == '1' then
  checkpoint(ARGV[2])
  local records = cjson.decode(ARGV[3])
  for _, record in ipairs(records) do redis.call('RPUSH', ctx, record) end
  redis.call('HINCRBY', meta, 'messages', #records)
end
return redis.call('HGET', meta, 'next')
"""
)

# kimi's DenwaRenji.send_dmail checks, in order.  ARGV: dmailJson, checkpointId
# -> {0, seq} stored | {1, error text}
SEND = (
    LIB
    + """
if redis.call('EXISTS', dmail) == 1 then return {1, 'Only one D-Mail can be sent at a time'} end
local id = tonumber(ARGV[2])
if id < 0 then return {1, 'The checkpoint ID can not be negative'} end
if id >= tonumber(redis.call('HGET', meta, 'next') or '0') then
  return {1, 'There is no checkpoint with the given ID'}
end
redis.call('SET', dmail, ARGV[1])
return {0, redis.call('HINCRBY', meta, 'events', 1)}
"""
)

# End of a step. ARGV: rejectedWithoutFeedback ('1'|'0'), root ('1'|'0'), addCheckpointMessage ('1'|'0'),
# dmailMessagePrefix
# -> {'none'} | {'discarded', dmailJson, seq} | {'applied', dmailJson, seq, checkpointId, firstNewPosition}
STEP_END = (
    LIB
    + """
local pending = redis.call('GET', dmail)
if ARGV[1] == '1' and ARGV[2] == '1' then
  if not pending then return {'none'} end
  redis.call('DEL', dmail)
  return {'discarded', pending, redis.call('HINCRBY', meta, 'events', 1)}
end
if not pending then return {'none'} end
redis.call('DEL', dmail)
local mail = cjson.decode(pending)
local id = tonumber(mail.checkpoint_id)
if not revert(id) then
  return {'discarded', pending, redis.call('HINCRBY', meta, 'events', 1)}
end
local first = redis.call('LLEN', ctx)
checkpoint(ARGV[3])
local text = ARGV[4] .. mail.text
redis.call('RPUSH', ctx, cjson.encode({role = 'user', content = '<system>' .. text .. '</system>'}))
redis.call('HINCRBY', meta, 'messages', 1)
return {'applied', pending, redis.call('HINCRBY', meta, 'events', 1), id, first}
"""
)


@dataclass(frozen=True, slots=True)
class SessionScripts:
    append: Script
    checkpoint: Script
    revert: Script
    clear: Script
    send: Script
    step_end: Script

    @classmethod
    def register(cls, client: Redis) -> SessionScripts:
        return cls(
            append=client.register_script(APPEND),
            checkpoint=client.register_script(CHECKPOINT),
            revert=client.register_script(REVERT),
            clear=client.register_script(CLEAR),
            send=client.register_script(SEND),
            step_end=client.register_script(STEP_END),
        )
