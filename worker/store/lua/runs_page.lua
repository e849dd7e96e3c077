-- RUNS_PAGE: one page of a runs index, newest first: members with score <= max_score and >= min_score, after the
-- cursor. The cursor is (max_score, after): members of that exact score at or above it (their order within one
-- score is reverse lexicographic) were on earlier pages. Read-only. -> {member, score, member, score, …}
local index = KEYS[1]
local max_score, after, min_score, count = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local n = tonumber(count)
local min = -math.huge
if min_score ~= '-inf' then min = tonumber(min_score) end
local max = math.huge
local start = 0
if max_score ~= '+inf' then
  max = tonumber(max_score)
  start = redis.call('ZCOUNT', index, '(' .. max_score, '+inf')
end
local out = {}
while #out < 2 * n do
  local page = redis.call('ZREVRANGE', index, start, start + n - 1, 'WITHSCORES')
  if #page == 0 then return out end
  for i = 1, #page, 2 do
    local score = tonumber(page[i + 1])
    if score < min then return out end
    if not (after ~= '' and score == max and page[i] >= after) then
      out[#out + 1] = page[i]
      out[#out + 1] = page[i + 1]
      if #out >= 2 * n then return out end
    end
  end
  start = start + n
end
return out
