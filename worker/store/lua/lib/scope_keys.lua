-- The keys of one scope built in Lua (POP_ACQUIRE, which learns the scope from the ref it pops): the KEY_*
-- constants are templates worker/keys/lua_half.py makes with the Python key builders ($P$ the key prefix, $T$
-- the tenant, $S$ the scope key), so the layout is declared once. One scope bucket only (see that module).
-- -> the keys ACQUIRE takes (lib/acquire.lua's k)
local function scope_keys(prefix, tenant, scope)
  local marks = {P = prefix, T = tenant, S = scope}
  local function fill(template) return (string.gsub(template, '%$([PTS])%$', marks)) end
  return {lease = fill(KEY_LEASE), fence = fill(KEY_FENCE), inbox = fill(KEY_INBOX), sched = fill(KEY_SCHED),
    scopes = fill(KEY_SCOPES), paused = fill(KEY_PAUSED), stats = fill(KEY_STATS),
    runs_active = fill(KEY_RUNS_ACTIVE), runs_cancelled = fill(KEY_RUNS_CANCELLED),
    ev_prefix = fill(KEY_EVENT_PREFIX)}
end
