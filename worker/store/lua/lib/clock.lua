-- Redis's own clock, in whole milliseconds since the epoch: the one clock every process's scripts agree on (a
-- death's date, a fence's first number, a due time, a lease's end), whatever the callers' clocks say.
local function redis_now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
