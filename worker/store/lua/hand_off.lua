-- HAND_OFF: a drain hands its scope off (worker/drain/pipeline.py): our lease released (token-checked), the
-- scope kept scheduled (the caller publishes its next drain). With marker_px, while the lease was still ours, the
-- scope's drain marker is set to cover a wait (the head's retry time) so the reconcile sweep leaves the scope alone
-- until its delayed drain is due: set only under our lease, so a drain that lost its scope never marks one that
-- another holder may have released meanwhile (a marker on an idle scope would keep its next event's drain from
-- being published). Its value is the writer's schedule TTL (without the wait): the marker's age is that less its
-- PTTL (EventStore.marker_age_ms), negative while the wait lasts.
-- -> ReleaseCode.HELD_BY_ANOTHER | ReleaseCode.RELEASED (or it had already expired)
local lease, sched = KEYS[1], KEYS[2]
local token, marker_px, ttl_ms = ARGV[1], ARGV[2], ARGV[3]
local holder = redis.call('GET', lease)
if holder and holder ~= token then return ReleaseCode.HELD_BY_ANOTHER end
if holder then
  redis.call('DEL', lease)
  if marker_px ~= '0' then redis.call('SET', sched, ttl_ms, 'PX', marker_px) end
end
return ReleaseCode.RELEASED
