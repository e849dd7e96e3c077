-- JOURNAL_APPLY: a journal record's commands (worker/store/journal.py) applied once in their slot, the
-- once-marker set first. The touched keys (keys_written) follow the marker: every key the commands write, all in
-- one slot. -> 1 applied | 0 applied before | error "REFUSED <reason>" (nothing written) | error "PARTIAL …" (a
-- command failed midway; the marker keeps why, so every later delivery fails too)
-- requires: staged
local marker = KEYS[1]
local marker_ttl_s, commands_json = ARGV[1], ARGV[2]
local done = redis.call('GET', marker)
if done == '1' then return 0 end
if done then return redis.error_reply('PARTIAL earlier: ' .. done) end
local cmds = cjson.decode(commands_json)
local bad = check_staged(cmds)
if bad then return redis.error_reply('REFUSED ' .. bad[2]) end
local broken = apply_staged(cmds)
if broken then
  -- what came before the failure stays applied: never again, and the record ends dead, not delivered
  local why = 'command ' .. broken[1] .. ': ' .. broken[2]
  redis.call('SET', marker, why, 'EX', marker_ttl_s)
  return redis.error_reply('PARTIAL ' .. why)
end
redis.call('SET', marker, '1', 'EX', marker_ttl_s)
return 1
