-- Hash writes gathered per key and written with one HSET per key (hflush): an event taken as the head and
-- committed in the same script (every event of a run after the first) pays one HSET, not five. A value may be a
-- table (an attempt history), encoded as JSON at the flush, so a history changed twice is encoded once. Whoever
-- reads a hash a script may have written calls hflush(key) first; a script that wrote calls hflush_all() before
-- it returns (its first write is still the first command that writes, so a full store refuses it there: an
-- unflushed write is simply not made).
local pending = {}
local function hset_later(key, ...)
  local fields = pending[key]
  if not fields then
    fields = {}
    pending[key] = fields
  end
  for i = 1, select('#', ...), 2 do  -- no table of the arguments: three calls per committed event
    local field, value = select(i, ...)
    fields[field] = value
  end
end
local function hflush(key)
  local fields = pending[key]
  if not fields then return end
  pending[key] = nil
  local flat = {}
  for f, v in pairs(fields) do
    flat[#flat + 1] = f
    flat[#flat + 1] = type(v) == 'table' and cjson.encode(v) or v
  end
  redis.call('HSET', key, unpack(flat))
end
-- HDEL of one or more fields, pending writes of them dropped too.
local function hdel(key, ...)
  local fields = pending[key]
  if fields then
    for _, f in ipairs({...}) do fields[f] = nil end
  end
  redis.call('HDEL', key, ...)
end
local function hflush_all()
  for key in pairs(pending) do hflush(key) end
end
