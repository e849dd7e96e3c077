-- requires: user_bytes, clock
-- What every session script shares (sessions/scripts.py says how the context store and the mailbox work).
-- KEYS: ctx, ctxmeta, ckpt, usage, dmail, settings, function state, and the user's session index when the
-- session names a user (the session's keys, whose TTL is refreshed with them); then the tenant's stored bytes
-- and, when the session names a user, that user's (worker/store/quotas.py).
-- ARGV[1..6]: ttlSeconds, maxRecords, maxBytes, maxUserBytes, maxTenantBytes (0: none), and the user the caller
-- found in the settings when it chose the keys ('' for none); each script's own arguments follow.
local ctx, meta, ckpt, usage, dmail = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
-- The session moved to another user (or to one, or to none) since the caller read its settings: nothing is
-- written, and the caller reads the user again (else this write's bytes would count for the previous user).
if (redis.call('HGET', KEYS[6], 'userId') or '') ~= ARGV[6] then return {'moved'} end
local ttl, max_records, max_bytes = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local session_key_count = 7  -- the session's own keys (8 with its user's session index)
if ARGV[6] ~= '' then session_key_count = 8 end
-- the stored bytes (worker/store/quotas.py): the tenant's, and the session's user's when it names one (else nil)
local tbytes, ubytes = KEYS[session_key_count + 1], KEYS[session_key_count + 2]
local max_user_bytes, max_tenant_bytes = tonumber(ARGV[4]), tonumber(ARGV[5])
local now_ms = redis_now_ms()
local uday = 'd' .. math.floor((now_ms + ttl * 1000) / DAY_MS)  -- the context expires a TTL after this write
local ustale, tstale = {}, {}  -- the ended days, forgotten once the script is done
local function done(reply)
  for i = 1, session_key_count do redis.call('EXPIRE', KEYS[i], ttl) end
  if ubytes then forget_fields(ubytes, ustale) end
  forget_fields(tbytes, tstale)
  return reply
end
-- nil, or the reply refusing a write because the user's data, or the tenant's, is at its quota:
-- {'quota', bytes, retryAfterS, 'user'|'tenant'}
local function quota_full()
  local used, earliest
  if ubytes and max_user_bytes > 0 then
    used, earliest, ustale = user_bytes(ubytes, now_ms)
    if used >= max_user_bytes then return {'quota', used, user_bytes_retry_s(earliest, now_ms), 'user'} end
  end
  if max_tenant_bytes > 0 then
    used, earliest, tstale = user_bytes(tbytes, now_ms)
    if used >= max_tenant_bytes then return {'quota', used, user_bytes_retry_s(earliest, now_ms), 'tenant'} end
  end
  return nil
end
-- count n stored bytes until the session's TTL as of this write: the tenant's, and the user's
local function count_stored(n)
  if ubytes then redis.call('HINCRBY', ubytes, uday, n) end
  redis.call('HINCRBY', tbytes, uday, n)
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
-- Where the context's records were counted, so that the bytes a revert, a clear or a compaction drops are given
-- back in the days they count in: meta's 'u:<day field>' holds the bytes counted that day in the count of the
-- user meta's 'countedFor' names ('' for none), 't:<day field>' those counted in the tenant's. 'countedFor' is
-- 'moved' (sessions/store.py MOVED: no key name, so it names no user) once a settings write moved the session to
-- another user, or once an erasure of its user took that user's count out of the tenant's (FORGET_USER_BYTES):
-- nothing is taken back then (take_back), and the next record forgets the days.
local function count_record(n)
  local user = ubytes or ''
  if (redis.call('HGET', meta, 'countedFor') or '') ~= user then
    -- the session moved to another user: what was counted before stays in that user's count and the tenant's
    -- until its days end (as a pending D-Mail's bytes do); an erasure of that user takes it out of the tenant's,
    -- and the session's user was erased: it is out of the tenant's already. Either way it is never taken back.
    local moved = {}
    for _, field in ipairs(redis.call('HKEYS', meta)) do
      local prefix = string.sub(field, 1, 2)
      if prefix == 'u:' or prefix == 't:' then moved[#moved + 1] = field end
    end
    forget_fields(meta, moved)
    redis.call('HSET', meta, 'countedFor', user)
  end
  if ubytes then redis.call('HINCRBY', meta, 'u:' .. uday, n) end
  redis.call('HINCRBY', meta, 't:' .. uday, n)
end
-- the days meta counted under prefix ('u:' or 't:') that still count, latest first: {field, bytes}; the ended
-- ones are forgotten (their bytes count no longer)
local function counted_days(prefix)
  local today = math.floor(now_ms / DAY_MS)
  local days, ended = {}, {}
  local raw = redis.call('HGETALL', meta)
  for i = 1, #raw, 2 do
    if string.sub(raw[i], 1, #prefix) == prefix then
      local field = string.sub(raw[i], #prefix + 1)
      local day = tonumber(string.sub(field, 2))
      if day == nil or day < today then ended[#ended + 1] = raw[i]
      else days[#days + 1] = {day = day, field = field, bytes = tonumber(raw[i + 1]) or 0} end
    end
  end
  forget_fields(meta, ended)
  table.sort(days, function(a, b) return a.day > b.day end)
  return days
end
-- take n dropped bytes back from counts (the user's or the tenant's stored bytes), the latest counted day first
-- (a revert drops the latest records), each day by no more than the session counted in it, and none below zero
local function take_back_from(prefix, counts, n)
  for _, counted in ipairs(counted_days(prefix)) do
    if n <= 0 then return end
    local take = math.min(counted.bytes, n)
    n = n - take
    if take == counted.bytes then redis.call('HDEL', meta, prefix .. counted.field)
    else redis.call('HINCRBY', meta, prefix .. counted.field, -take) end
    local held = tonumber(redis.call('HGET', counts, counted.field) or '0')
    if held > 0 then redis.call('HINCRBY', counts, counted.field, -math.min(held, take)) end
  end
end
-- give the n bytes of dropped records back to the user's count and the tenant's, when the session's user is
-- still the one they were counted for (else they stay in both until their days end, or an erasure took them out
-- of the tenant's: count_record)
local function take_back(n)
  if n <= 0 or (redis.call('HGET', meta, 'countedFor') or '') ~= (ubytes or '') then return end
  if ubytes then take_back_from('u:', ubytes, n) end
  take_back_from('t:', tbytes, n)
end
local function push(record)
  redis.call('RPUSH', ctx, record)
  redis.call('HINCRBY', meta, 'bytes', #record)
  count_stored(#record)
  count_record(#record)
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
-- a checkpoint's entry in ckpt: 'position:messages:bytes:serial', the serial (meta's 'serial', never reused,
-- not even across a clear) telling this checkpoint from an earlier one of the same id
local function checkpoint(add_message)
  local id = tonumber(redis.call('HGET', meta, 'next') or '0')
  local pos = redis.call('LLEN', ctx)
  local msgs = tonumber(redis.call('HGET', meta, 'messages') or '0')
  local serial = redis.call('HINCRBY', meta, 'serial', 1)
  redis.call('HSET', meta, 'bytes', stored_bytes())
  redis.call('HSET', ckpt, id, pos .. ':' .. msgs .. ':' .. stored_bytes() .. ':' .. serial)
  redis.call('HSET', meta, 'next', id + 1)
  local records = checkpoint_records(id, add_message)
  for _, record in ipairs(records) do push(record) end
  redis.call('HINCRBY', meta, 'messages', #records - 1)
  return id
end
-- the serial of checkpoint id as it stands: nil when there is none, '' for one written before serials
local function checkpoint_serial(id)
  local at = redis.call('HGET', ckpt, id)
  if not at then return nil end
  local _, _, _, serial = string.match(at, '^([^:]*):([^:]*):?([^:]*):?([^:]*)$')
  return serial or ''
end
local function revert(id)
  local n = tonumber(redis.call('HGET', meta, 'next') or '0')
  if id < 0 or id >= n then return false end
  local at = {}
  for part in string.gmatch(redis.call('HGET', ckpt, id), '[^:]+') do at[#at + 1] = tonumber(part) end
  local pos, msgs, bytes = at[1], at[2], at[3]
  local before = stored_bytes()
  if pos == 0 then redis.call('DEL', ctx) else redis.call('LTRIM', ctx, 0, pos - 1) end
  bytes = bytes or count_bytes()
  take_back(before - bytes)
  for k = id, n - 1 do redis.call('HDEL', ckpt, k) end
  redis.call('ZREMRANGEBYSCORE', usage, pos, '+inf')
  local last = redis.call('ZRANGE', usage, -1, -1)
  local tokens = 0
  if last[1] then tokens = tonumber(string.sub(last[1], string.find(last[1], ':', 1, true) + 1)) end
  redis.call('HSET', meta, 'next', id, 'messages', msgs, 'tokenCount', tokens, 'bytes', bytes)
  return true
end
