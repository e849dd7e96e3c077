-- The events queued right behind the head that have never been delivered (no attempt, no retry time, no cancel,
-- no redrive: a redriven event has been delivered before and its lanes may be marked): a run may take them
-- before they are begun. skip: the events right behind the head the caller knows already (from an earlier
-- commit's list: worker/drain/ahead.py); the list starts after them. -> {id, eventJson, sourceType, sourceId, ...}
local function peek_fresh(inbox, ev_prefix, now, count, skip)
  local out = {}
  if count <= 0 then return out end
  local first, last = string.format('%d', 1 + skip), string.format('%d', skip + count)
  for _, id in ipairs(redis.call('LRANGE', inbox, first, last)) do
    local rec = redis.call('HMGET', ev_prefix .. id, 'state', 'event', 'attempts', 'notBefore', 'cancelRequested',
      'redrives', 'sourceType', 'sourceId')
    -- attempts is stored as its digits: '0' until the event's first delivery
    if rec[1] ~= 'queued' or not rec[2] or (rec[3] and rec[3] ~= '0') or rec[5] or rec[6] then break end
    if rec[4] and (tonumber(rec[4]) or 0) > tonumber(now) then break end
    out[#out + 1] = id
    out[#out + 1] = rec[2]
    out[#out + 1] = rec[7] or ''
    out[#out + 1] = rec[8] or ''
  end
  return out
end
