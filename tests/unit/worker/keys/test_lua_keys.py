"""The key layout's Lua half (worker/keys/lua_half.py, worker/store/lua/lib/scope_keys.lua) builds exactly the
keys the Python layout builds, for awkward tenants and scope keys, so POP_ACQUIRE and ACQUIRE cannot drift."""

from __future__ import annotations

import pytest
from redis import Redis

from worker.keys.layout import Keys
from worker.keys.lua_half import MARKERS, lua_key_templates
from worker.store.loader import load_script, script_text
from worker.store.scripts import CONSTANTS

# A script that only builds keys: the lib piece and the KEY_* constants as the loader declares them, on the real
# Redis.
PROBE = (
    "local k = scope_keys(ARGV[1], ARGV[2], ARGV[3])\n"
    "return {k.lease, k.fence, k.inbox, k.sched, k.scopes, k.paused, k.stats, k.runs_active, k.runs_cancelled, "
    "k.ev_prefix}"
)


def _lua_keys(client: Redis, prefix: str, tenant: str, scope: str) -> list[str]:
    constants = "".join(f"local {name} = '{template}'\n" for name, template in lua_key_templates().items())
    script = constants + script_text("worker.store", "lib/scope_keys") + PROBE
    return list(client.eval(script, 0, prefix, tenant, scope))


def test_pop_acquire_loads_the_templates() -> None:
    text = load_script("pop_acquire", constants=CONSTANTS)
    for name in lua_key_templates():
        assert f"local {name} = " in text


def test_templates_carry_only_the_markers() -> None:
    for name, template in lua_key_templates().items():
        assert template.count("$") == 2 * sum(template.count(m) for m in MARKERS.values()), name
        assert CONSTANTS[name] == template


@pytest.mark.parametrize(
    "tenant, scope",
    [
        ("default", "topic:t-1"),
        ("acme", "bot:slack:A1:thread/with/slashes"),
        ("t_2", "user:%1 $S$ {braces} 100%"),  # a marker, % and braces inside a scope key stay as they are
    ],
)
def test_lua_half_builds_the_python_keys(redis_client: Redis, prefix: str, tenant: str, scope: str) -> None:
    k = Keys(prefix, tenant).for_scope(scope)
    want = [
        k.lease(scope),
        k.fence(scope),
        k.inbox(scope),
        k.scheduled(scope),
        k.scopes,
        k.runs("paused"),
        k.stats,
        k.runs("status", "active"),
        k.runs("status", "cancelled"),
        k.event_prefix,
    ]
    assert _lua_keys(redis_client, prefix, tenant, scope) == want
