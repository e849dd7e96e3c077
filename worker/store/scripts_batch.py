"""Batch commits (worker/drain/batch.py): several head events of one scope committed in one script.

COMMIT_BATCH runs COMMIT's own body (``COMMIT_BODY``, wrapped in a Lua function of ``(KEYS, ARGV)``) once per
event, in inbox order, so each event is committed exactly as a lone COMMIT would commit it: fenced, at the
head, with its outcome, chain, staged writes and follow-ups. Before each event it applies the idempotency
lanes of the actions the event's chain ran (what APPLY does one by one on the slow path) when the event is
still our head and no cancel was asked for it. Every event's COMMIT goes on (``continue`` = 1) and so takes
the next head, which begins the next event of the batch; an event that is not the head that commit took ends
the batch there. After the last commit, PEEK_FRESH's loop lists the next fresh events for the next batch.
"""

from __future__ import annotations

from worker.store.scripts_lifecycle import ADMIT, COMMIT_BODY, STAGED, TAKE_HEAD

__all__ = ["COMMIT_ARGS", "COMMIT_BATCH", "COMMIT_KEYS", "EVENT_ARGS", "EVENT_KEYS", "PEEK_FRESH"]

COMMIT_KEYS = 16  # EventStore.commit_call: COMMIT's keys
COMMIT_ARGS = 18  # and arguments
# The positions (1-based, as in Lua) of COMMIT's keys and arguments that are each event's own: its event hash
# and chain; its id, outcome, error, notBefore, chain, chainId, continue, staged writes and follow-ups. The
# others are the scope's and the tenant's, the same for every event of a batch, which sends them once
# (EventStore.commit_shared / commit_own): 38 arguments an event became 11.
EVENT_KEYS = (3, 6)
EVENT_ARGS = (2, 3, 6, 7, 8, 10, 14, 15, 16)


def _lua_list(positions: tuple[int, ...]) -> str:
    return "{" + ", ".join(map(str, positions)) + "}"


# Shared Lua: the events queued right behind the head that have never been delivered (no attempt, no retry
# time, no cancel): a batch may run them before they are begun.
# -> {id, eventJson, sourceType, sourceId, id, ...}
PEEK = """
local function peek_fresh(inbox, ev_prefix, now, count)
  local out = {}
  if count <= 0 then return out end
  for _, id in ipairs(redis.call('LRANGE', inbox, 1, count)) do
    local rec = redis.call('HMGET', ev_prefix .. id, 'state', 'event', 'attempts', 'notBefore', 'cancelRequested',
      'redrives', 'sourceType', 'sourceId')
    -- a redriven event has been delivered before (its lanes may be marked): not fresh
    if rec[1] ~= 'queued' or not rec[2] or (tonumber(rec[3] or '0') or 0) > 0 or rec[5] or rec[6] then break end
    if rec[4] and (tonumber(rec[4]) or 0) > tonumber(now) then break end
    out[#out + 1] = id
    out[#out + 1] = rec[2]
    out[#out + 1] = rec[7] or ''
    out[#out + 1] = rec[8] or ''
  end
  return out
end
"""

# The fresh events behind our head (fenced, and only while the head is the one we hold).
# KEYS: inbox, fence   ARGV: fence, evPrefix, nowMs, headId, count   -> {} | {id, eventJson, sourceType, sourceId, ...}
PEEK_FRESH = (
    PEEK
    + """
if redis.call('GET', KEYS[2]) ~= ARGV[1] or redis.call('LINDEX', KEYS[1], 0) ~= ARGV[4] then return {} end
return peek_fresh(KEYS[1], ARGV[2], ARGV[3], tonumber(ARGV[5]))
"""
)

# KEYS: COMMIT's 16 keys as the scope's events share them, then per event: its EVENT_KEYS, then one
#       idempotency lane key per action it applied
# ARGV: n, laneTtlS, peekCount, COMMIT's 18 arguments as the scope's events share them (one nowMs for the
#       batch), then per event: laneCount, its EVENT_ARGS, then per lane: resultJson, effectsJson
# A batch of more than one event that committed whole is counted in the tenant's stats (batchCommits,
# batchedEvents).
# -> {code, {COMMIT reply per event tried}, peek}:
#    1 all committed (peek: the fresh events behind the new head) | 2 the batch ended before event #replies+1,
#    which is not the head now (a retry, or the scope released): nothing wrong | -4 event #replies+1 was not
#    committed: a lane was already marked, or its staged writes would be refused (redo it one by one) |
#    -5 event #replies+1: a lane's staged write failed midway (commit it dead; index and reason follow the peek) | -1, -2, -3: the last reply's
#    COMMIT code (stale fence, another head, a refused staged write)
COMMIT_BATCH = (
    TAKE_HEAD
    + ADMIT
    + STAGED
    + PEEK
    + f"local EVENT_KEYS, EVENT_ARGS = {_lua_list(EVENT_KEYS)}, {_lua_list(EVENT_ARGS)}\n"
    + "local function commit_event(KEYS, ARGV)\n"
    + COMMIT_BODY
    + "\nend\n"
    + """
local n, lane_ttl, peek_n = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local shared_keys, shared_args = {unpack(KEYS, 1, 16)}, {unpack(ARGV, 4, 21)}
local kp, ap = 17, 22
BATCHED = true
local function run_batch()
  local out = {}
  local inbox, ev_prefix, now = nil, '', 0
  for i = 1, n do
    local lanes_n = tonumber(ARGV[ap])
    ap = ap + 1
    local ck, ca = {unpack(shared_keys)}, {unpack(shared_args)}
    for j, pos in ipairs(EVENT_KEYS) do ck[pos] = KEYS[kp + j - 1] end
    for j, pos in ipairs(EVENT_ARGS) do ca[pos] = ARGV[ap + j - 1] end
    kp, ap = kp + #EVENT_KEYS, ap + #EVENT_ARGS
    inbox, ev_prefix, now = ck[1], ca[13], ca[4]
    local lanes = {}
    for j = 1, lanes_n do
      lanes[j] = {KEYS[kp], ARGV[ap], cjson.decode(ARGV[ap + 1])}
      kp, ap = kp + 1, ap + 2
    end
    local at_head = redis.call('LINDEX', ck[1], 0) == ca[2]
    if i > 1 and not (at_head and redis.call('HGET', ck[3], 'state') == 'processing') then return {2, out, {}} end
    if lanes_n > 0 and at_head and redis.call('GET', ck[2]) == ca[1]
        and redis.call('HEXISTS', ck[3], 'cancelRequested') == 0 then
      local seen = {}
      for _, lane in ipairs(lanes) do
        if seen[lane[1]] or redis.call('EXISTS', lane[1]) == 1 or check_staged(lane[3]) then
          return {-4, out, {}}
        end
        seen[lane[1]] = true
      end
      for _, lane in ipairs(lanes) do
        local broken = apply_staged(lane[3])
        if broken then return {-5, out, {}, broken[1], broken[2]} end
        redis.call('SET', lane[1], lane[2], 'EX', lane_ttl)
      end
    end
    local r = commit_event(ck, ca)
    out[#out + 1] = r
    if r[1] ~= 1 then return {r[1], out, {}} end
  end
  if n > 1 then
    count(KEYS[5], 'batchCommits', 1)
    count(KEYS[5], 'batchedEvents', #out)
  end
  local last = out[#out]
  local peek = {}
  if last and last[5] == 1 then peek = peek_fresh(inbox, ev_prefix, now, peek_n) end
  return {1, out, peek}
end
local reply = run_batch()
index_trim(shared_args[4], shared_args[5])
counts_flush()
return reply
"""
)
