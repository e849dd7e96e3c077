-- requires: session
-- Whether an applied D-Mail fits the session's caps (send.lua refuses one that would not; step_end.lua discards
-- one that no longer does, after the caps were lowered). Applying reverts to checkpoint ``id``, keeping what came
-- before its ``_checkpoint`` record, re-creates the checkpoint (with its CHECKPOINT message when ``add_message``
-- is '1') and appends the D-Mail's user message, ``record_bytes`` long.
-- -> nil (it fits, or there is no such checkpoint: step end discards the D-Mail then) | 'records' | 'bytes'
local function applied_room(id, add_message, record_bytes)
  local at = redis.call('HGET', ckpt, id)
  if not at then return nil end
  local parts = {}
  for part in string.gmatch(at, '[^:]+') do parts[#parts + 1] = tonumber(part) end
  local pos, bytes = parts[1], parts[3]
  if not bytes then  -- an entry written before entries kept the bytes before their checkpoint
    bytes = 0
    if pos > 0 then bytes = size(redis.call('LRANGE', ctx, 0, pos - 1)) end
  end
  local planned = checkpoint_records(id, add_message)
  return room(#planned + 1, size(planned) + record_bytes, pos, bytes)
end
