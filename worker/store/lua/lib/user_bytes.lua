-- One user's stored bytes (worker/store/quotas.py), a field per day the data expires ('d<day>') or KEEP_FIELD.
-- user_bytes(key, now) -> bytes counted, the earliest day still counted (nil: only kept data), the fields of days
-- that have ended (forget_fields deletes them once the script has written).
local function user_bytes(key, now)
  local today = math.floor(now / DAY_MS)
  local raw = redis.call('HGETALL', key)
  local total, earliest, stale = 0, nil, {}
  for i = 1, #raw, 2 do
    local field, n = raw[i], tonumber(raw[i + 1]) or 0
    if field == KEEP_FIELD then
      total = total + n
    else
      local day = tonumber(string.sub(field, 2))
      if day == nil or day < today then
        stale[#stale + 1] = field
      else
        total = total + n
        if earliest == nil or day < earliest then earliest = day end
      end
    end
  end
  return total, earliest, stale
end
local function user_bytes_retry_s(earliest, now)
  if earliest == nil then return 0 end
  return math.max(1, math.ceil(((earliest + 1) * DAY_MS - now) / 1000))
end
local function forget_fields(key, fields)
  if #fields > 0 then redis.call('HDEL', key, unpack(fields)) end
end
