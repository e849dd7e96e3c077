-- RELEASE: hand a scope off, releasing our lease but keeping the scheduled-drain marker (the caller publishes the
-- next drain). Releasing an idle scope happens inside ACQUIRE and COMMIT, atomically with the empty-inbox check,
-- so an event appended while we release is never stranded.
-- -> ReleaseCode.HELD_BY_ANOTHER | ReleaseCode.RELEASED (or it had already expired)
local lease = KEYS[1]
local token = ARGV[1]
local holder = redis.call('GET', lease)
if holder and holder ~= token then return ReleaseCode.HELD_BY_ANOTHER end
if holder then redis.call('DEL', lease) end
return ReleaseCode.RELEASED
