-- Counters (stats, series) summed in the script and written once per key and field when it ends
-- (counts_flush): a batch of events pays one HINCRBY per field, not one per event. A script whose path
-- counted calls counts_flush before it returns. n is a whole number, sent as its digits (a Lua number given to
-- redis.call is formatted with %.17g, a few thousand instructions each).
local counted = {}
local function count(key, field, n)
  local fields = counted[key]
  if not fields then
    fields = {}
    counted[key] = fields
  end
  fields[field] = (fields[field] or 0) + n
end
local function counts_flush()
  for key, fields in pairs(counted) do
    for field, n in pairs(fields) do redis.call('HINCRBY', key, field, string.format('%d', n)) end
  end
  counted = {}
end
