-- FORGET_ENDED: remove from a user's session index the sessions that ended (no settings left: expired or
-- erased), checked and removed in one step, so a session made again meanwhile under the same id stays.
-- KEYS[1]: the user's session index; KEYS[i + 1]: the settings of the session ARGV[i] names. -> removed
local removed = 0
for i, member in ipairs(ARGV) do
  if redis.call('EXISTS', KEYS[i + 1]) == 0 then
    removed = removed + redis.call('SREM', KEYS[1], member)
  end
end
return removed
