-- TOKEN_BUCKETS: rate limits (worker/ops/rate_limit.py): token buckets checked and charged in one round trip,
-- the credential's first, then the tenant's. whole '1': all or nothing (a batch of events): admitted once every
-- bucket holds min(want, burst) tokens (a batch past the burst can still pass), then charged all want tokens; a
-- bucket may go below 0, and that debt delays the next requests (wait_ms counts it); else up to want tokens, as
-- many as every bucket has.
-- -> {granted, wait_ms, index of the bucket that refused (0: none)}
-- requires: clock
local want, whole = ARGV[1], ARGV[2]
local BUCKET_KEYS, BUCKET_ARGS = 1, 2
local asked, all_or_nothing = tonumber(want), whole == '1'
local now = redis_now_ms()
local tokens, rates, bursts = {}, {}, {}
local granted, wait_ms, refused = asked, 0, 0
for i = 1, #KEYS do
  local k, a = 1 + (i - 1) * BUCKET_KEYS, 3 + (i - 1) * BUCKET_ARGS
  local bucket = KEYS[k]
  local rate, burst = ARGV[a], ARGV[a + 1]
  rate, burst = tonumber(rate), tonumber(burst)
  local state = redis.call('HMGET', bucket, 'tokens', 'at')
  local have, at = tonumber(state[1]), tonumber(state[2])
  if have == nil or at == nil then
    have, at = burst, now
  end
  have = math.min(burst, have + math.max(0, now - at) * rate / 1000)
  tokens[i], rates[i], bursts[i] = have, rate, burst
  local need = 1
  if all_or_nothing then need = math.min(asked, burst) end
  if have < need then
    local wait = math.ceil((need - have) * 1000 / rate)
    if wait > wait_ms then wait_ms, refused = wait, i end
    granted = 0
  elseif not all_or_nothing then
    granted = math.min(granted, math.floor(have))
  end
end
for i, bucket in ipairs(KEYS) do
  local have = tokens[i]
  if granted > 0 then have = have - granted end
  redis.call('HSET', bucket, 'tokens', tostring(have), 'at', tostring(now))
  -- kept until it would be full again (a debt too: an expired bucket would forgive it)
  redis.call('PEXPIRE', bucket, math.ceil((bursts[i] - have) * 1000 / rates[i]) + 1000)
end
return {granted, wait_ms, refused}
