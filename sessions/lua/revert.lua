-- REVERT the context to a checkpoint. -> 1 reverted | 0 no such checkpoint
-- requires: session
local checkpoint_id = ARGV[7]
if revert(tonumber(checkpoint_id)) then return done(1) end
return done(0)
