"""The server-side Lua scripts: every multi-key state change of the pipeline is one atomic round trip.

Each script's contract is in the comment above it. Scripts are registered once per Redis client
(``register_script`` uses EVALSHA and falls back to EVAL after a server restart).
"""

from __future__ import annotations

from dataclasses import dataclass

from redis import Redis
from redis.commands.core import Script

__all__ = ["Scripts"]

# Shared Lua: admit one event: claim its dedupe record (the event hash) and append it to its scope inbox,
# or count a duplicate. -> {1, publish(0|1)} accepted (publish=1: no drain is scheduled for the scope, send
# one) | {0, 0} duplicate. Used by ENQUEUE_BATCH (producers) and COMMIT (follow-up events a chain emitted).
ADMIT = """
local function wrong_type(key, want)
  local found = redis.call('TYPE', key).ok
  return found ~= 'none' and found ~= want
end
-- Checked before a script writes anything: nil, or why admitting into these keys would fail midway.
local function admit_refusal(ev, inbox, sched, seq)
  if wrong_type(ev, 'hash') then return ev .. ' is not a hash' end
  if wrong_type(inbox, 'list') then return inbox .. ' is not a list' end
  if wrong_type(sched, 'string') then return sched .. ' is not a string' end
  if wrong_type(seq, 'string') then return seq .. ' is not a string' end
  return nil
end
-- seq: the scope's enqueue counter; the event keeps its number ('seq'), so a redrive can tell whether later
-- events of its scope were enqueued after it (and so ran before it).
-- ref: the scope ref "<tenant>/<scopeKey>" (the scopes registry holds refs; the event keeps the bare key).
-- uidx/user: the user's event index (erasure and the runs explorer find a user's events there); user '' = none.
-- susers: the users whose events the scope holds (erasure drops a scope whole only when it is one user's).
local function admit(ev, inbox, sched, seq, scopes, stats, id, ref, body, now, window, sched_ttl, uidx, user,
    susers)
  if redis.call('EXISTS', ev) == 1 then
    redis.call('HINCRBY', ev, 'duplicates', 1)
    redis.call('HINCRBY', stats, 'duplicate', 1)
    return {0, 0}
  end
  local scope = string.sub(ref, (string.find(ref, '/', 1, true) or 0) + 1)
  redis.call('HSET', ev, 'state', 'queued', 'eventId', id, 'scopeKey', scope, 'event', body,
    'enqueuedAt', now, 'attempts', 0, 'seq', redis.call('INCR', seq))
  redis.call('EXPIRE', ev, window)
  redis.call('RPUSH', inbox, id)
  redis.call('SADD', scopes, ref)
  if user ~= '' then
    redis.call('HSET', ev, 'userId', user)
    redis.call('ZADD', uidx, now, id)
    redis.call('EXPIRE', uidx, window)
    redis.call('SADD', susers, user)
  else
    redis.call('SADD', susers, '*')  -- an event of nobody in particular: the scope is never one user's alone
  end
  redis.call('HINCRBY', stats, 'accepted', 1)
  redis.call('HINCRBY', stats, 'queued', 1)  -- the tenant's events not yet done or dead (its quota)
  if redis.call('SET', sched, now, 'NX', 'PX', sched_ttl) then return {1, 1} end
  return {1, 0}
end
"""

# Shared Lua: the Redis commands handlers stage (worker.context.EffectBuffer), checked before anything is
# written and applied with pcall. check_staged -> nil | {index, reason}: a command outside the allow-list or a
# key of another type than the command needs; apply_staged -> nil | {index, error} (a runtime error such as
# HINCRBY on a non-integer field: the commands before it stay applied, the caller commits nothing else).
STAGED = """
local WRITE_TYPES = {SET='string', SETNX='string', INCR='string', INCRBY='string', DECRBY='string',
  HSET='hash', HSETNX='hash', HDEL='hash', HINCRBY='hash', HINCRBYFLOAT='hash',
  RPUSH='list', LPUSH='list', LTRIM='list', LREM='list', SADD='set', SREM='set',
  ZADD='zset', ZREM='zset', ZINCRBY='zset', DEL=false, EXPIRE=false, PEXPIRE=false, PERSIST=false,
  PUBLISH=false}
local function check_staged(cmds)
  for i, cmd in ipairs(cmds) do
    local expected = WRITE_TYPES[string.upper(cmd[1])]
    if expected == nil then return {i, 'command not allowed: ' .. cmd[1]} end
    if expected then
      local found = redis.call('TYPE', cmd[2]).ok
      if found ~= 'none' and found ~= expected then
        return {i, 'WRONGTYPE: ' .. cmd[1] .. ' needs a ' .. expected .. ' but ' .. cmd[2] .. ' holds a ' .. found}
      end
    end
  end
  return nil
end
local function apply_staged(cmds)
  for i, cmd in ipairs(cmds) do
    local reply = redis.pcall(unpack(cmd))
    if type(reply) == 'table' and reply.err then return {i, reply.err} end
  end
  return nil
end
"""

# Enqueue a batch (see ADMIT) in one script, so it is stored whole or not at all: a Redis that is full
# (noeviction) refuses the script's first write, before anything was written, and the script stops there;
# a key of the wrong type is found before the first write too (a "REFUSED …" error, nothing written).
# KEYS: scopes, stats, tenants, then per event: ev, inbox, sched, seq, user index, scope users
# ARGV: nowMs, windowS, schedTtlMs, tenant, maxInboxDepth, maxTenantQueued (0: no limit), then per event:
#       eventId, scopeRef (<tenant>/<scopeKey>), eventJson, userId ('' when none)
# A batch that would take a scope's inbox past maxInboxDepth, or the tenant's queued events past
# maxTenantQueued, is refused whole before any write: "OVERLIMIT inbox <scopeRef> <depth>" or
# "OVERLIMIT tenant <queued>" (the door answers 429).
# -> one {accepted(1|0), publish(1|0)} per event, in order (a repeat inside the batch is a duplicate)
ENQUEUE_BATCH = (
    ADMIT
    + """
if wrong_type(KEYS[1], 'set') or wrong_type(KEYS[2], 'hash') or wrong_type(KEYS[3], 'set') then
  return redis.error_reply('REFUSED WRONGTYPE: the scopes set, the stats hash or the tenants set')
end
for i = 0, (#KEYS - 3) / 6 - 1 do
  local k = 4 + i * 6
  local refusal = admit_refusal(KEYS[k], KEYS[k + 1], KEYS[k + 2], KEYS[k + 3])
  if refusal then return redis.error_reply('REFUSED WRONGTYPE: ' .. refusal) end
end
local n = (#KEYS - 3) / 6
local max_inbox, max_queued = tonumber(ARGV[5]), tonumber(ARGV[6])
if max_queued > 0 then
  local queued = tonumber(redis.call('HGET', KEYS[2], 'queued') or '0')
  if queued + n > max_queued then return redis.error_reply('OVERLIMIT tenant ' .. queued) end
end
if max_inbox > 0 then
  local adding = {}
  for i = 0, n - 1 do
    local inbox = KEYS[4 + i * 6 + 1]
    adding[inbox] = (adding[inbox] or redis.call('LLEN', inbox)) + 1
    if adding[inbox] > max_inbox then
      return redis.error_reply('OVERLIMIT inbox ' .. ARGV[7 + i * 4 + 1] .. ' ' .. (adding[inbox] - 1))
    end
  end
end
redis.call('SADD', KEYS[3], ARGV[4])
local out = {}
for i = 0, n - 1 do
  local k, a = 4 + i * 6, 7 + i * 4
  out[i + 1] = admit(KEYS[k], KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[1], KEYS[2], ARGV[a], ARGV[a + 1],
    ARGV[a + 2], ARGV[1], ARGV[2], ARGV[3], KEYS[k + 4], ARGV[a + 3], KEYS[k + 5])
end
return out
"""
)

# Shared Lua: take the head of a scope's inbox for processing. Heads that are already final (done/dead) or
# whose record expired are popped and skipped. ``ev_prefix`` is Keys.event_prefix (an event's key is the
# prefix followed by its id: the one key the scripts complete themselves, because the head's id is only
# known inside the script).  Returns {0} inbox empty | {3, id, notBefore} head waits for
# its retry time | {1, id, eventJson, attempts, prevState, lastError} head taken (state -> processing).
TAKE_HEAD = """
local function take_head(inbox, ev_prefix, now, fence)
  for _ = 1, 1000 do
    local id = redis.call('LINDEX', inbox, 0)
    if not id then return {0} end
    local ek = ev_prefix .. id
    local rec = redis.call('HMGET', ek, 'state', 'event', 'notBefore', 'error')
    if not rec[2] or rec[1] == 'done' or rec[1] == 'dead' then
      redis.call('LPOP', inbox)
    else
      local nb = tonumber(rec[3] or '0') or 0
      if nb > tonumber(now) then return {3, id, tostring(nb)} end
      local attempts = redis.call('HINCRBY', ek, 'attempts', 1)
      redis.call('HSET', ek, 'state', 'processing', 'startedAt', now, 'fence', fence)
      return {1, id, rec[2], attempts, rec[1], rec[4] or ''}
    end
  end
  return {3, '', now}
end
local function release_if_idle(inbox, lease, sched, scopes, token, scope)
  if redis.call('LLEN', inbox) > 0 then return false end
  if redis.call('GET', lease) == token then redis.call('DEL', lease) end
  redis.call('DEL', sched)
  redis.call('SREM', scopes, scope)
  return true
end
"""

# Grant the scope lease, issue the next fencing number, and take the head event, in one round trip. Fencing
# numbers are compared for equality by every fenced write; they start at Redis's clock (see below).
# KEYS: lease, fence, inbox, sched, scopes   ARGV: token, ttlMs, evPrefix, nowMs, scopeRef
# -> {0, pttl} held by someone else | {fence, <take_head reply>} granted; when the inbox was empty the
#    lease is released again in the same script (reply {fence, 0}).
ACQUIRE = (
    TAKE_HEAD
    + """
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {0, redis.call('PTTL', KEYS[1])}
end
local fence = redis.call('INCR', KEYS[2])
if fence == 1 then
  -- A new (or erased) fence starts at Redis's clock in ms, above any number an earlier incarnation of this
  -- scope's fence handed out, so a holder paused across an erasure can never match it.
  local t = redis.call('TIME')
  fence = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('SET', KEYS[2], fence)
end
local head = take_head(KEYS[3], ARGV[3], ARGV[4], fence)
if head[1] == 0 then release_if_idle(KEYS[3], KEYS[1], KEYS[4], KEYS[5], ARGV[1], ARGV[5]) end
table.insert(head, 1, fence)
return head
"""
)

# Extend the lease only if we still own it.  KEYS: lease  ARGV: token, ttlMs  -> 1 | 0
RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

# Hand the scope off: release our lease but keep the scheduled-drain marker (the caller publishes the next
# drain). Releasing an idle scope happens inside ACQUIRE/COMMIT, atomically with the empty-inbox check, so
# an event appended while we release is never stranded.
# KEYS: lease   ARGV: token   -> -1 another holder owns it | 1 released (or had already expired)
RELEASE = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return -1 end
if holder then redis.call('DEL', KEYS[1]) end
return 1
"""

# Commit the head event's outcome (fenced): done, dead (to the DLQ), or back to queued for a retry; then,
# when ARGV[14] is '1', go on in the same round trip: take the next head, or release the scope if it is idle.
# Only a 'done' commit applies what the chain's source and signal handlers staged: their Redis commands
# (ARGV[15], a JSON list of command lists) and the follow-up events they emitted (ARGV[16], a JSON list of
# [evKey, inboxKey, schedKey, seqKey, userIndexKey, scopeUsersKey, eventId, scopeRef, eventJson, userId]). A retried or dead event leaves no trace of them.
# KEYS: inbox, fence, ev, dlq, stats, chain, lease, sched, scopes, series (per-minute done count and latency)
# ARGV: fence, eventId, outcome, nowMs, windowS, error, notBefore, chainJson, chainTtlS, chainId,
#       token, scopeRef, evPrefix, continue, effectsJson, followupsJson, schedTtlMs
# -> {-1} stale fence (rejected and counted) | {-2} the head is another event | {-3, index, reason} a staged
#    command was refused (checked before any write) or failed (see STAGED): the event is left at the head,
#    still processing, for the caller to commit dead | {1, {scopes that need a drain message},
#    <take_head reply>?} committed (no take_head reply without
#    continuation; {0}: inbox empty, scope released)
COMMIT = (
    TAKE_HEAD
    + ADMIT
    + STAGED
    + """
if redis.call('GET', KEYS[2]) ~= ARGV[1] then
  redis.call('HINCRBY', KEYS[5], 'fenceRejected', 1)
  return {-1}
end
if redis.call('LINDEX', KEYS[1], 0) ~= ARGV[2] then return {-2} end
local staged = {}
if ARGV[3] == 'done' then
  staged = cjson.decode(ARGV[15])
  local refused = check_staged(staged)
  if refused then return {-3, refused[1], refused[2]} end
  for i, f in ipairs(cjson.decode(ARGV[16])) do
    local refusal = admit_refusal(f[1], f[2], f[3], f[4])
    if refusal then return {-3, #staged + i, 'WRONGTYPE: follow-up ' .. refusal} end
  end
  local broken = apply_staged(staged)
  if broken then return {-3, broken[1], broken[2]} end
end
if ARGV[8] ~= '' then redis.call('SET', KEYS[6], ARGV[8], 'EX', ARGV[9]) end
if ARGV[10] ~= '' then redis.call('HSET', KEYS[3], 'chainId', ARGV[10]) end
local publish = {}
if ARGV[3] == 'retry' then
  redis.call('HSET', KEYS[3], 'state', 'queued', 'error', ARGV[6], 'notBefore', ARGV[7])
  redis.call('HINCRBY', KEYS[5], 'retried', 1)
else
  redis.call('LPOP', KEYS[1])
  redis.call('HINCRBY', KEYS[5], 'queued', -1)
  if ARGV[3] == 'done' then
    for _, f in ipairs(cjson.decode(ARGV[16])) do
      local r = admit(f[1], f[2], f[3], f[4], KEYS[9], KEYS[5], f[7], f[8], f[9], ARGV[4], ARGV[5], ARGV[17],
        f[5], f[10], f[6])
      if r[2] == 1 then table.insert(publish, f[8]) end
    end
    redis.call('HSET', KEYS[3], 'state', 'done', 'doneAt', ARGV[4])
    redis.call('HDEL', KEYS[3], 'notBefore')
    redis.call('EXPIRE', KEYS[3], ARGV[5])
    redis.call('HINCRBY', KEYS[5], 'done', 1)
    local minute = math.floor(tonumber(ARGV[4]) / 60000)
    local enqueued = tonumber(redis.call('HGET', KEYS[3], 'enqueuedAt') or ARGV[4])
    redis.call('HINCRBY', KEYS[10], minute .. ':done', 1)
    redis.call('HINCRBY', KEYS[10], minute .. ':latency_ms', tonumber(ARGV[4]) - enqueued)
  else
    redis.call('HSET', KEYS[3], 'state', 'dead', 'error', ARGV[6], 'deadAt', ARGV[4])
    redis.call('PERSIST', KEYS[3])
    redis.call('ZADD', KEYS[4], ARGV[4], ARGV[2])
    redis.call('HINCRBY', KEYS[5], 'dead', 1)
  end
end
if ARGV[14] ~= '1' then return {1, publish} end
local head = take_head(KEYS[1], ARGV[13], ARGV[4], tonumber(ARGV[1]))
if head[1] == 0 then release_if_idle(KEYS[1], KEYS[7], KEYS[8], KEYS[9], ARGV[11], ARGV[12]) end
table.insert(head, 1, publish)
table.insert(head, 1, 1)
return head
"""
)

# Apply an action's staged effects and mark its idempotency lane, once, if our fence is current.
# KEYS: idem, fence   ARGV: fence, resultJson, ttlS, effectsJson (list of command lists)
# -> {1} applied | {0} lane already marked (nothing done) | {-1} stale fence (nothing done)
#    | {-3, index, reason} a staged command was refused or failed (see STAGED); the lane stays unmarked
APPLY = (
    STAGED
    + """
if redis.call('EXISTS', KEYS[1]) == 1 then return {0} end
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return {-1} end
local staged = cjson.decode(ARGV[4])
local refused = check_staged(staged)
if refused then return {-3, refused[1], refused[2]} end
local broken = apply_staged(staged)
if broken then return {-3, broken[1], broken[2]} end
redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
return {1}
"""
)

# Put a dead event back at the tail of its scope's inbox (the order decision: docs/decisions.md). Marks it
# redriven (redrivenAt, redrives): it now runs after every event of its scope enqueued before the redrive,
# including those enqueued after it the first time (the status record says outOfOrder).
# KEYS: ev, inbox, sched, scopes, dlq, stats, seq   ARGV: eventId, scopeRef, nowMs, schedTtlMs, windowS
# -> {1, publish} requeued | {0, 0} not dead (nothing done)
REDRIVE = """
if redis.call('HGET', KEYS[1], 'state') ~= 'dead' then return {0, 0} end
redis.call('HSET', KEYS[1], 'state', 'queued', 'attempts', 0, 'redrivenAt', ARGV[3])
-- Later events of the scope (a higher enqueue number) have run, or wait ahead of it: it runs after them.
if tonumber(redis.call('GET', KEYS[7]) or '0') > tonumber(redis.call('HGET', KEYS[1], 'seq') or '0') then
  redis.call('HSET', KEYS[1], 'outOfOrder', 1)
end
redis.call('HINCRBY', KEYS[1], 'redrives', 1)
redis.call('HDEL', KEYS[1], 'notBefore')
redis.call('EXPIRE', KEYS[1], ARGV[5])
redis.call('ZREM', KEYS[5], ARGV[1])
redis.call('RPUSH', KEYS[2], ARGV[1])
redis.call('SADD', KEYS[4], ARGV[2])
redis.call('HINCRBY', KEYS[6], 'redriven', 1)
redis.call('HINCRBY', KEYS[6], 'queued', 1)
if redis.call('SET', KEYS[3], ARGV[3], 'NX', 'PX', ARGV[4]) then return {1, 1} end
return {1, 0}
"""


# Claim the next outbox record due now (Redis's clock): its due time moves one lease ahead, and that deadline
# is the claim (a relay that dies leaves it due again when the lease runs out).
# KEYS: outbox-due   ARGV: leaseMs   -> {} nothing due | {member, deadline}
OUTBOX_CLAIM = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 1)
if #due == 0 then return {} end
local deadline = now + tonumber(ARGV[1])
redis.call('ZADD', KEYS[1], 'XX', deadline, due[1])
return {due[1], deadline}
"""

# Settle a claimed outbox record, only while the claim holds (its due time is still our deadline).
# KEYS: outbox-due, record   ARGV: member, deadline, recordJson, nextDue ('' = done: leave outbox-due)
# -> 1 settled | 0 the claim was lost (another relay took the record; nothing written)
OUTBOX_SETTLE = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) ~= tonumber(ARGV[2]) then return 0 end
redis.call('SET', KEYS[2], ARGV[3], 'KEEPTTL')
if ARGV[4] == '' then redis.call('ZREM', KEYS[1], ARGV[1]) else redis.call('ZADD', KEYS[1], 'XX', ARGV[4], ARGV[1]) end
return 1
"""


@dataclass(frozen=True, slots=True)
class Scripts:
    """The scripts, registered on one client."""

    enqueue_batch: Script
    acquire: Script
    renew: Script
    release: Script
    commit: Script
    apply: Script
    redrive: Script
    outbox_claim: Script
    outbox_settle: Script

    @classmethod
    def register(cls, client: Redis) -> Scripts:
        return cls(
            enqueue_batch=client.register_script(ENQUEUE_BATCH),
            acquire=client.register_script(ACQUIRE),
            renew=client.register_script(RENEW),
            release=client.register_script(RELEASE),
            commit=client.register_script(COMMIT),
            apply=client.register_script(APPLY),
            redrive=client.register_script(REDRIVE),
            outbox_claim=client.register_script(OUTBOX_CLAIM),
            outbox_settle=client.register_script(OUTBOX_SETTLE),
        )
