"""A plugin author's mistakes are refused at load, naming the plugin or the handler, or end the event saying
what went wrong: an audit wrote a newcomer's plugins and found a second handler of an action type never run, a
handler's answer of the wrong type dropped, a source handler listening to a typo'd type loaded and never called,
``source_types="a.b"`` admitting single letters, and a factory's error printed without the plugin's name."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.unit.worker.chain.test_scheduler import MemoryPort, _source
from worker.chain.context import HandlerContext
from worker.chain.registry import Policy, Registry, define_action_handler, define_source_handler
from worker.chain.scheduler import run_chain
from worker.core.errors import PermanentFailure
from worker.core.nodes import Action, Dispatch, Source, action_from, signal_from
from worker.runtime.assembly import PluginLoadError, _import, check_source_handlers
from worker.runtime.plugin_model import Plugin
from worker.settings import Settings


def _nothing(node: Any, ctx: HandlerContext) -> None:
    return None


def test_a_second_handler_of_an_action_type_is_refused() -> None:
    first = define_action_handler("pay", "plugin-a.pay", _nothing)
    second = define_action_handler("pay", "plugin-b.pay", _nothing)
    with pytest.raises(ValueError, match=r"'pay' has two handlers, 'plugin-a\.pay' and 'plugin-b\.pay'"):
        Registry.from_policies([Policy("a", [first]), Policy("b", [second])])
    sources = [define_source_handler("x.event", f"h{i}", _nothing) for i in range(2)]
    assert (
        len(Registry.from_policies([Policy("s", sources)]).match("source", "x.event")) == 2
    )  # fan-out stays


def test_a_source_handler_of_a_type_nobody_declares_is_refused_with_the_nearest(make_settings: Any) -> None:
    registry = Registry.from_policies(
        [Policy("t", [define_source_handler("typo.evnet", "typo.on", _nothing)])]
    )
    with pytest.raises(
        PluginLoadError, match=r"'typo\.on' listens to 'typo\.evnet'.*did you mean 'typo\.event'"
    ):
        check_source_handlers(registry, ["typo.event"], make_settings())
    check_source_handlers(registry, [], make_settings(extra_source_types=["typo.evnet"]))
    check_source_handlers(registry, [], make_settings(allow_unknown_source_types=True))


def test_source_types_given_as_one_string_are_refused() -> None:
    with pytest.raises(TypeError, match="source_types is a list of types, not one string"):
        Plugin(name="p", source_types="str.event")


def test_a_handler_function_of_the_wrong_shape_is_refused_when_defined() -> None:
    def one_argument(node: Any) -> None:
        return None

    with pytest.raises(
        TypeError,
        match=r"define_source_handler\('h'\): its function must take \(node, ctx\); one_argument\(node"
        r": 'Any'\) -> 'None' does not",
    ):
        define_source_handler("x.event", "h", one_argument)  # type: ignore[arg-type]


class _Payload:
    """Not a pydantic model: a plain class given as a payload schema."""


def _deliver(record: Any) -> None:
    return None


@pytest.mark.parametrize(
    ("fields", "refused"),
    [
        ({"payload_schemas": {"t.x": _Payload}}, r"payload_schemas\['t\.x'\] must be a pydantic model class"),
        (
            {"payload_schemas": {"t.x": {"a": "str"}}},
            r"payload_schemas\['t\.x'\] must be a pydantic model class",
        ),
        (
            {"erase_user": lambda user_id: {}},
            r"erase_user must take \(redis, keys, user_id, scopes\); <lambda>",
        ),
        (
            {"deliverers": {"k": "nope"}},
            r"deliverers\['k'\] must be a function taking \(runtime\), a factory",
        ),
    ],
    ids=["a plain class", "a dict", "erase_user of one argument", "a deliverer that is no function"],
)
def test_plugin_fields_that_would_fail_only_when_used_are_refused_when_made(
    fields: dict[str, Any], refused: str
) -> None:
    """Each passed the plugin's load and failed later, each time it was used: every event of the type a 500 at
    the door, every erasure a 500 after the engine's part, every record of the kind dead."""
    with pytest.raises(TypeError, match=r"Plugin\('p'\): " + refused):
        Plugin(name="p", **fields)


def test_a_deliver_function_given_where_its_factory_belongs_is_refused_at_assembly(
    make_settings: Any, keys: Any
) -> None:
    """``deliverers={kind: deliver}``: the engine called ``deliver(runtime)`` and kept its None, and every record
    of the kind died of "'NoneType' object is not callable", naming neither. A factory's error names the plugin
    too."""
    from redis import Redis
    from redis.exceptions import ConnectionError as RedisConnectionError

    from worker.runtime.assembly import assemble
    from worker.store.events import EventStore

    settings = make_settings()
    store = EventStore(Redis.from_url(settings.redis_url, decode_responses=True), settings)

    def failing(runtime: Any) -> Any:
        raise RuntimeError("no endpoint configured")

    cases = [
        (
            Plugin(name="p", deliverers={"k": _deliver}),
            r"plugin 'p': deliverers\['k'\]\(runtime\) returned a NoneType, not a deliver",
        ),
        (
            Plugin(name="p", services=failing),
            r"plugin 'p': services\(runtime\) raised RuntimeError: no endpoint",
        ),
    ]
    for plugin, refused in cases:
        with pytest.raises(PluginLoadError, match=refused):
            assemble([plugin], settings, store, publish_drain=lambda ref: None)

    def store_down(runtime: Any) -> Any:
        raise RedisConnectionError("the store is away")

    # the store's error is no plugin's mistake: not a PluginLoadError, which stops a worker (worker/runtime/app.py)
    with pytest.raises(RedisConnectionError):
        assemble([Plugin(name="p", services=store_down)], settings, store, publish_drain=lambda ref: None)
    store.client.close()


def test_two_plugins_of_one_name_are_named_with_their_specs(
    make_settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It said "plugins loaded twice: activity" for a plugin of the user's named like a shipped one."""
    from worker.runtime.assembly import load_plugins

    (tmp_path / "namesake_plugin.py").write_text(
        "from worker.plugin import Plugin\ndef plugin():\n    return Plugin(name='activity')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        PluginLoadError, match=r"two plugins are named 'activity' \(.*namesake_plugin:plugin\)"
    ):
        load_plugins(make_settings(plugins=["namesake_plugin:plugin"]), check_env=False)
    sys.modules.pop("namesake_plugin", None)


def test_a_factory_that_fails_names_the_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "broken_factory_plugin.py").write_text("def plugin():\n    raise KeyError('LEDGER_TABLE')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        PluginLoadError, match=r"plugin 'broken_factory_plugin:plugin': KeyError: 'LEDGER_TABLE'"
    ):
        _import("broken_factory_plugin:plugin")
    sys.modules.pop("broken_factory_plugin", None)


@pytest.mark.parametrize("answer", [[object()], {"status": "applied"}, "done"])
def test_an_answer_of_the_wrong_type_ends_the_event_saying_so(answer: Any) -> None:
    """A source handler's list of signals, or an action handler's dict, was dropped: the event ended done with
    nothing run. Now it dies at once (PermanentFailure ``INVALID_RESULT``) naming the handler and the type."""

    def source_answers(s: Source, ctx: HandlerContext) -> Any:
        return answer

    registry = Registry.from_policies(
        [Policy("p", [define_source_handler("agent.user.message", "src", source_answers)])]
    )
    with pytest.raises(
        PermanentFailure, match=rf"src returned {type(answer).__name__}; a source handler returns"
    ) as e:
        run_chain(_source(), registry, MemoryPort())
    assert e.value.code == "INVALID_RESULT"

    def emits(s: Source, ctx: HandlerContext) -> Dispatch:
        sig = signal_from(s, "b", "signal.b", {}, ctx.now())
        return Dispatch(
            signals=[sig], actions=[action_from(sig, "pay", "pay", {"idempotencyKey": "k1"}, ctx.now())]
        )

    def action_answers(a: Action, ctx: HandlerContext) -> Any:
        return answer

    registry = Registry.from_policies(
        [
            Policy(
                "p",
                [
                    define_source_handler("agent.user.message", "src", emits),
                    define_action_handler("pay", "act", action_answers),
                ],
            )
        ]
    )
    with pytest.raises(
        PermanentFailure, match=rf"act returned {type(answer).__name__}; an action handler returns"
    ):
        run_chain(_source(), registry, MemoryPort())


def test_the_settings_fixture_is_the_engines(make_settings: Any) -> None:
    assert isinstance(make_settings(), Settings)


def test_a_refused_del_names_the_key_it_refused(keys: Any) -> None:
    """DEL takes many keys: the refusal named the first (the handler's own), not the one outside its tenant."""
    from worker.chain.context import EffectBuffer

    mine, theirs = keys.plugin("topic:a", "mine"), keys.for_tenant("other").plugin("topic:a", "theirs")
    with pytest.raises(PermanentFailure, match=f"DEL '{theirs}'"):
        EffectBuffer(keys=keys).call("DEL", mine, theirs)


@pytest.mark.parametrize("nothing", [None, False, [], 0, ""])
def test_a_falsy_answer_is_nothing_as_in_lobehub(nothing: Any) -> None:
    """LobeHub reads a falsy result as nothing: ``return cond and Dispatch(...)`` is an idiom, not a mistake."""

    def answers(s: Source, ctx: HandlerContext) -> Any:
        return nothing

    registry = Registry.from_policies(
        [Policy("p", [define_source_handler("agent.user.message", "src", answers)])]
    )
    assert run_chain(_source(), registry, MemoryPort()).status == "completed"


def test_the_checks_run_when_the_plugins_load(
    make_settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A review found the checks only in assemble(), which a worker's children run after it said it was ready:
    it then ran nothing. load_plugins (every process's boot) refuses such a plugin set itself."""
    from worker.runtime.assembly import load_plugins

    (tmp_path / "second_pay_plugin.py").write_text(
        "from worker.plugin import Plugin, Policy, define_action_handler\n"
        "def plugin():\n"
        "    h = define_action_handler('action.user-memory.handle', 'second.memory', lambda a, ctx: None)\n"
        "    return Plugin(name='second', policies=lambda runtime: [Policy('second', [h])])\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginLoadError, match=r"'action\.user-memory\.handle' has two handlers"):
        load_plugins(make_settings(plugins=["second_pay_plugin:plugin"]), check_env=False)
    sys.modules.pop("second_pay_plugin", None)


def _twice(first: dict[str, Any], second: dict[str, Any], name_2: str = "charge") -> Registry:
    """A source handler that dispatches two actions (the second named ``name_2``) of one type, and its handler."""

    def plan(s: Source, ctx: HandlerContext) -> Dispatch:
        sig = signal_from(s, "order", "signal.order", {}, ctx.now())
        return Dispatch(
            signals=[sig],
            actions=[
                action_from(sig, "charge", "action.charge", first, ctx.now()),
                action_from(sig, name_2, "action.charge", second, ctx.now()),
            ],
        )

    def charge(a: Action, ctx: HandlerContext) -> Any:
        from worker.chain.results import applied

        ctx.effects.call("RPUSH", "agent-signal:t:{default}:charged", str(a.payload["item"]))
        return applied(a, ctx, "charged")

    return Registry.from_policies(
        [
            Policy(
                "p",
                [
                    define_source_handler("agent.user.message", "plan", plan),
                    define_action_handler("action.charge", "charge", charge),
                ],
            )
        ]
    )


def test_two_actions_under_one_key_with_different_payloads_end_the_event_saying_so() -> None:
    """A walk dispatched two actions of one name (so one id, the idempotency key) for two items: the second
    replayed the first's result, never ran, and the trace showed both applied. Now the event dies at once."""
    with pytest.raises(PermanentFailure, match=r"plan dispatched two actions under the idempotency key") as e:
        run_chain(_source(), _twice({"item": 1}, {"item": 2}), MemoryPort())
    assert e.value.code == "INVALID_RESULT"


def test_actions_that_differ_by_name_or_key_each_run_and_the_same_one_twice_runs_once() -> None:
    port = MemoryPort()
    run_chain(_source("m1"), _twice({"item": 1}, {"item": 2}, name_2="charge-2"), port)
    keyed = _twice({"item": 3, "idempotencyKey": "k3"}, {"item": 4, "idempotencyKey": "k4"})
    run_chain(_source("m2"), keyed, port)
    run_chain(_source("m3"), _twice({"item": 5}, {"item": 5}), port)  # the same action twice: idempotent
    assert [effect[2:] for effect in port.effects] == [["1"], ["2"], ["3"], ["4"], ["5"]]


def test_an_action_type_no_handler_takes_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    """A misspelt action type ran nothing and said nothing (the event done, its chain with no result). The
    first one of a type is logged as a warning, naming it; later ones are not (it would be once per event)."""

    def plan(s: Source, ctx: HandlerContext) -> Dispatch:
        sig = signal_from(s, "esc", "signal.esc", {}, ctx.now())
        return Dispatch(
            signals=[sig], actions=[action_from(sig, "notify", "action.esc.notfy", {}, ctx.now())]
        )

    from worker.chain import scheduler

    registry = Registry.from_policies(
        [Policy("p", [define_source_handler("agent.user.message", "src", plan)])]
    )
    scheduler._UNHANDLED.discard("action.esc.notfy")  # said once per process: this test may not be its first
    with caplog.at_level("WARNING", logger="worker.chain.scheduler"):
        run_chain(_source("n1"), registry, MemoryPort())
        run_chain(_source("n2"), registry, MemoryPort())
    said = [r.getMessage() for r in caplog.records if "has no handler" in r.getMessage()]
    assert said == [
        "action type 'action.esc.notfy' has no handler: its actions are kept in their chains and run nothing "
        "(a typo in the type, or the plugin that handles it is not loaded)"
    ]


def test_the_unhandled_types_said_are_capped(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plugin that makes action types from data would grow the set of types said for good: it holds at most
    UNHANDLED_MAX, and a type past it runs nothing and is not said."""
    from worker.chain import scheduler

    types = [f"action.gen.t{i}" for i in range(3)]

    def plan(s: Source, ctx: HandlerContext) -> Dispatch:
        sig = signal_from(s, "gen", "signal.gen", {}, ctx.now())
        actions = [action_from(sig, f"a{i}", t, {}, ctx.now()) for i, t in enumerate(types)]
        return Dispatch(signals=[sig], actions=actions)

    registry = Registry.from_policies(
        [Policy("p", [define_source_handler("agent.user.message", "src", plan)])]
    )
    monkeypatch.setattr(scheduler, "_UNHANDLED", set())
    monkeypatch.setattr(scheduler, "UNHANDLED_MAX", 2)
    with caplog.at_level("WARNING", logger="worker.chain.scheduler"):
        trace = run_chain(_source("g1"), registry, MemoryPort())
    said = [r.getMessage().split("'")[1] for r in caplog.records if "has no handler" in r.getMessage()]
    assert said == types[:2] and scheduler._UNHANDLED == set(types[:2])
    assert [a.action_type for a in trace.actions] == types and trace.results == []


def test_a_plugin_module_not_found_says_where_python_looks() -> None:
    """``No module named 'myplugins'`` alone: the launcher does not put the current directory on sys.path."""
    with pytest.raises(PluginLoadError, match=r"No module named 'no_such_plugins'.*on PYTHONPATH"):
        _import("no_such_plugins.escalation:plugin")


def test_a_plugin_spec_naming_no_function_says_what_it_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``module:TICKET_MESSAGE`` (a string) was refused as "must return a Plugin", though nothing was called."""
    (tmp_path / "named_constant_plugin.py").write_text(
        "TICKET_MESSAGE = 'app.ticket.message'\ndef nothing():\n    return None\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginLoadError, match=r"TICKET_MESSAGE is a str, not a Plugin nor a function"):
        _import("named_constant_plugin:TICKET_MESSAGE")
    with pytest.raises(
        PluginLoadError, match=r"must return a Plugin or a list of Policy \(it returned a NoneType\)"
    ):
        _import("named_constant_plugin:nothing")
    sys.modules.pop("named_constant_plugin", None)
