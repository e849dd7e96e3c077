-- requires: ready_pop, acquire
-- Pop the next ready scope and take its lease (POP_ACQUIRE, and a COMMIT that pops the next scope): the scope's
-- keys built from the popped ref by scope_keys (a constant of the loader, worker/keys/lua_half.py: one Redis,
-- one scope bucket).
-- -> false (nothing ready: the caller's ticket is retired) | {ref} (not a scope ref: the caller drains it the
--    two-step way, which refuses it) | {ref, <ACQUIRE's reply>}
local function pop_grant(ring, tickets, ready_prefix, ticket_ttl_ms, key_prefix, token, ttl_ms, now_ms, window_s)
  local ref = ready_pop(ring, tickets, ready_prefix, ticket_ttl_ms)
  if not ref then return false end
  local slash = string.find(ref, '/', 1, true)
  if not slash or slash == 1 or slash == #ref then return {ref} end
  local k = scope_keys(key_prefix, string.sub(ref, 1, slash - 1), string.sub(ref, slash + 1))
  return {ref, acquire(k, token, ttl_ms, now_ms, ref, window_s)}
end
