-- APPLY: an action's staged writes and its idempotency mark, once, while our fence is current.
-- -> {ApplyCode.APPLIED} | {ApplyCode.ALREADY} (the lane was marked: nothing done) | {ApplyCode.STALE_FENCE}
--    (nothing done) | {ApplyCode.REFUSED, index, reason} (a staged command refused or failed, see staged.lua;
--    the lane stays unmarked)
-- requires: staged
local lane, fence_key = KEYS[1], KEYS[2]
local fence, result_json, lane_ttl_s, effects_json = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if redis.call('EXISTS', lane) == 1 then return {ApplyCode.ALREADY} end
if redis.call('GET', fence_key) ~= fence then return {ApplyCode.STALE_FENCE} end
local staged = cjson.decode(effects_json)
local refused = check_staged(staged)
if refused then return {ApplyCode.REFUSED, refused[1], refused[2]} end
local broken = apply_staged(staged)
if broken then return {ApplyCode.REFUSED, broken[1], broken[2]} end
redis.call('SET', lane, result_json, 'EX', lane_ttl_s)
return {ApplyCode.APPLIED}
