-- APPEND messages to the session's context (and a _usage record with the token count).
-- -> {'ok', number of messages} | {'full', 'records'|'bytes'} | {'quota', bytes, retryAfterS, 'user'|'tenant'}
--    (nothing written)
-- requires: session
local messages_json, token_count = ARGV[7], ARGV[8]
local records = cjson.decode(messages_json)
if token_count ~= '' then
  records[#records + 1] = cjson.encode({role = '_usage', token_count = tonumber(token_count)})
end
local full = room(#records, size(records), redis.call('LLEN', ctx), stored_bytes())
if full then return done({'full', full}) end
local over = quota_full()
if over then return done(over) end
redis.call('HSET', meta, 'bytes', stored_bytes())
local n = #records
if token_count ~= '' then n = n - 1 end
for i = 1, n do push(records[i]) end
local total = redis.call('HINCRBY', meta, 'messages', n)
if token_count ~= '' then
  local pos = redis.call('LLEN', ctx)
  push(records[#records])
  redis.call('ZADD', usage, pos, pos .. ':' .. token_count)
  redis.call('HSET', meta, 'tokenCount', token_count)
end
return done({'ok', total})
