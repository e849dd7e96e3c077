-- APPLY: an action's staged writes and its idempotency mark, once, while our fence is current. The lane is listed
-- in its event's hash at once and kept without a TTL (lib/kept_lanes.lua) until the event ends: a worker lost
-- after this, on the event's last attempt, leaves it dead with no run to say which lanes it marked, and a
-- redrive after the lane's TTL applied the action again.
-- The event must be one its holder began under this fence (processing, its `fence` field ours), as RENEW_SCOPE
-- asks: a store restored from a backup taken while the same drain ran an earlier event of the scope has the
-- drain's fence still current, and without this a later event's action applied ahead of the earlier ones.
-- -> {ApplyCode.APPLIED} | {ApplyCode.ALREADY} (the lane was marked: nothing done) | {ApplyCode.STALE_FENCE}
--    (nothing done) | {ApplyCode.REFUSED, index, reason} (a staged command refused or failed, see staged.lua;
--    the lane stays unmarked)
-- requires: staged, kept_lanes
local lane, fence_key, event, lane_holders = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local fence, result_json, effects_json = ARGV[1], ARGV[2], ARGV[3]
if redis.call('EXISTS', lane) == 1 then return {ApplyCode.ALREADY} end
if redis.call('GET', fence_key) ~= fence then return {ApplyCode.STALE_FENCE} end
local begun = redis.call('HMGET', event, 'state', 'fence')
if begun[1] ~= 'processing' or begun[2] ~= fence then return {ApplyCode.STALE_FENCE} end
local staged = cjson.decode(effects_json)
local refused = check_staged(staged)
if refused then return {ApplyCode.REFUSED, refused[1], refused[2]} end
local broken = apply_staged(staged)
if broken then return {ApplyCode.REFUSED, broken[1], broken[2]} end
redis.call('SET', lane, result_json)
list_lane(event, lane_holders, lane)
return {ApplyCode.APPLIED}
