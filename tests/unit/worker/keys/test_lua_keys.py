"""The key layout's Lua half (worker/keys/lua_half.py, the ``scope_keys`` function the loader writes into
POP_ACQUIRE and COMMIT) builds exactly the keys the Python layout builds, for awkward tenants and scope keys, so
POP_ACQUIRE and ACQUIRE cannot drift."""

from __future__ import annotations

import pytest
from redis import Redis

from worker.keys.layout import Keys
from worker.keys.lua_half import MARKERS, _concatenation, lua_key_templates, lua_scope_keys
from worker.store.loader import LuaSource, load_script
from worker.store.scripts import CONSTANTS

FIELDS = list(lua_key_templates())

# A script that only builds keys: the function as the loader declares it, on the real Redis.
PROBE = (
    "local k = scope_keys(ARGV[1], ARGV[2], ARGV[3])\nreturn {" + ", ".join(f"k.{f}" for f in FIELDS) + "}"
)


def _lua_keys(client: Redis, prefix: str, tenant: str, scope: str) -> list[str]:
    script = f"local scope_keys = {lua_scope_keys()}\n{PROBE}"
    return list(client.eval(script, 0, prefix, tenant, scope))


@pytest.mark.parametrize("script", ["pop_acquire", "commit"])
def test_the_scripts_that_pop_declare_the_function(script: str) -> None:
    text = load_script(script, constants=CONSTANTS)
    assert f"local scope_keys = {lua_scope_keys()}\n" in text
    assert "gsub" not in text  # nothing parsed per call


def test_a_script_declares_only_the_constants_it_names() -> None:
    renew = load_script("renew", constants=CONSTANTS)  # names none of them
    assert not [name for name in CONSTANTS if f"local {name} = " in renew]
    enqueue = load_script("enqueue", constants=CONSTANTS)  # the quotas', not the push's nor scope_keys
    assert [name for name in CONSTANTS if f"local {name} = " in enqueue] == [
        "DAY_MS",
        "KEEP_FIELD",
        "RETAINED_SLOTS",
        "BACKLOG_RETRY_S",
    ]
    pushing = load_script("enqueue_push", constants=CONSTANTS)  # and its push's, and its grant's (a pop)
    assert [name for name in CONSTANTS if f"local {name} = " in pushing] == [
        "DAY_MS",
        "KEEP_FIELD",
        "RETAINED_SLOTS",
        "BACKLOG_RETRY_S",
        "PUSH_CHUNK",
        "DRAIN_MARK",
        "DRAIN_GRANT",
        "GRANT_MAX_BODY_BYTES",
        "FENCE_IDLE_S",
        "LANE_FORM",
        "scope_keys",
    ]


def test_templates_carry_only_the_markers() -> None:
    assert isinstance(CONSTANTS["scope_keys"], LuaSource)
    for name, template in lua_key_templates().items():
        assert template.count("$") == 2 * sum(template.count(m) for m in MARKERS.values()), name
        assert "$" not in lua_scope_keys().split(f"{name} = ", 1)[1].split("\n", 1)[0], name


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
        k.lane_holders,
        k.event_prefix,
    ]
    assert FIELDS == [
        "lease",
        "fence",
        "inbox",
        "sched",
        "scopes",
        "paused",
        "stats",
        "runs_active",
        "runs_cancelled",
        "lane_holders",
        "ev_prefix",
    ]
    assert _lua_keys(redis_client, prefix, tenant, scope) == want


def test_a_template_literal_of_any_bytes_reads_back_as_it_is(redis_client: Redis) -> None:
    """The literal parts of a template are quoted for Lua byte for byte (a quote, a backslash, control bytes, a
    non-ASCII letter), so a layout with such a part would still build the Python's key."""
    template = "$P$q'b\\s\n\r\x00\té:{$T$}:x.. --y:{$S$}%1"
    values = {"$P$": "p:", "$T$": "t", "$S$": "s"}
    want = template
    for marker, value in values.items():
        want = want.replace(marker, value)
    got = redis_client.eval(
        f"local prefix, tenant, scope = 'p:', 't', 's'\nreturn {_concatenation(template)}", 0
    )
    assert got == want  # the client decodes UTF-8: byte for byte the same string
