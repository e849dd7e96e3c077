-- The Redis commands handlers stage (worker.chain.context.EffectBuffer), checked before anything is written and
-- applied with pcall. check_staged -> nil | {index, reason}: a command outside the allow-list or a key of another
-- type than the command needs; apply_staged -> nil | {index, error}: a runtime error such as HINCRBY on a
-- non-integer field (the commands before it stay applied, the caller commits nothing else). A full store is not
-- a broken write: the same call again raises its OOM error and ends the script (worker/store/server/full.py).
-- {'THEN', n} is no Redis command: right after a SET ... NX (or a SETNX), it makes the n commands after it run only
-- when that one wrote (a receipt's indexes, count and announcement follow its SET NX: an id its user already has
-- adds nothing).
local WRITE_TYPES = {SET='string', SETNX='string', INCR='string', INCRBY='string', DECRBY='string',
  HSET='hash', HSETNX='hash', HDEL='hash', HINCRBY='hash', HINCRBYFLOAT='hash',
  RPUSH='list', LPUSH='list', LTRIM='list', LREM='list', SADD='set', SREM='set',
  ZADD='zset', ZREM='zset', ZREMRANGEBYSCORE='zset', ZINCRBY='zset', DEL=false, EXPIRE=false, PEXPIRE=false, PERSIST=false,
  PUBLISH=false}
-- Keys whose type this script knows (key -> type): a command of type T applied without error leaves its key
-- holding a T (or nothing, when it removed the last element), so a later check of a T command on that key needs
-- no TYPE: a run's events often stage writes to one key, and pay one TYPE per script instead of one per event.
-- Nothing else in a script writes these keys (a handler's effects never name an engine key, and an engine
-- script writes no plugin key).
local known_type = {}
local function check_staged(cmds)
  for i, cmd in ipairs(cmds) do
    local name = string.upper(cmd[1])
    if name == 'THEN' and cmd[1] ~= 'THEN' then return {i, 'THEN is written in capitals'} end
    if name == 'THEN' then
      local n, before = tonumber(cmd[2]), cmds[i - 1]
      local guards = before and string.upper(before[1]) == 'SETNX'
      if before and string.upper(before[1]) == 'SET' then
        for j = 4, #before do guards = guards or string.upper(before[j]) == 'NX' end
      end
      if not (n and n >= 0 and n == math.floor(n) and i + n <= #cmds and guards) then
        return {i, 'THEN needs a count of the commands after it and a SET NX before it'}
      end
    end
    local expected = WRITE_TYPES[name]
    if name == 'THEN' then expected = false end
    if expected == nil then return {i, 'command not allowed: ' .. cmd[1]} end
    if expected and known_type[cmd[2]] ~= expected then
      local found = redis.call('TYPE', cmd[2]).ok
      if found ~= 'none' and found ~= expected then
        return {i, 'WRONGTYPE: ' .. cmd[1] .. ' needs a ' .. expected .. ' but ' .. cmd[2] .. ' holds a ' .. found}
      end
    end
  end
  return nil
end
local function apply_staged(cmds)
  local skip, wrote = 0, true
  for i, cmd in ipairs(cmds) do
    local name = cmd[1]
    if skip > 0 then
      skip = skip - 1
    elseif name == 'THEN' then  -- as call_once stages it (check_staged refused any other spelling)
      if not wrote then skip = tonumber(cmd[2]) end
    else
      local reply = redis.pcall(unpack(cmd))
      if type(reply) == 'table' and reply.err then
        if string.find(reply.err, 'OOM', 1, true) == 1 then redis.call(unpack(cmd)) end
        return {i, reply.err}
      end
      name = string.upper(name)
      local written = WRITE_TYPES[name]
      wrote = reply ~= false and reply ~= 0
      -- a SET NX/XX or SETNX that wrote nothing left the key as it was, whatever its type
      if written == 'string' and not wrote then written = nil end
      if written then
        known_type[cmd[2]] = written
      elseif name == 'DEL' then
        for j = 2, #cmd do known_type[cmd[j]] = nil end
      end
    end
  end
  return nil
end
