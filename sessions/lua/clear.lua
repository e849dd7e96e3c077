-- CLEAR: reset ids to 0 and drop everything (kimi's Context.clear); with compact '1' create checkpoint 0 at once
-- and append the compacted messages (encoded records) after it; a compaction that would not fit the caps changes
-- nothing. -> {'ok', next} | {'full', what} | {'quota', bytes, retryAfterS, 'user'|'tenant'}
-- requires: session
local compact, add_message, messages_json = ARGV[7], ARGV[8], ARGV[9]
local records = {}
if compact == '1' then
  records = cjson.decode(messages_json)
  local planned = checkpoint_records(0, add_message)
  local full = room(#planned + #records, size(planned) + size(records), 0, 0)
  if full then return done({'full', full}) end
  local over = quota_full()
  if over then return done(over) end
end
take_back(stored_bytes())  -- what the cleared records counted is given back
redis.call('DEL', ctx, ckpt, usage)
redis.call('HSET', meta, 'next', 0, 'messages', 0, 'tokenCount', 0, 'bytes', 0)
if compact == '1' then
  checkpoint(add_message)
  for _, record in ipairs(records) do push(record) end
  redis.call('HINCRBY', meta, 'messages', #records)
end
return done({'ok', redis.call('HGET', meta, 'next')})
