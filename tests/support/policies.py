"""The test plugin of the integration tests, loaded by real worker processes through
``AGENT_SIGNAL_PLUGINS=["tests.support.policies:bundle"]``; like any outside plugin it imports only
``worker.plugin``.

These are real handlers, not stand-ins. Their *effects* are staged (``ctx.effects``) like any plugin's; what
they write directly through the ``Probe`` (pids, attempt counts, timelines) is test instrumentation that
must be visible while the event is still running, so tests can observe ordering and crashes from outside.

* ``test.counter``: source → signal → action whose *effect* increments ``payload.counterKey`` (staged, so it
  is exactly-once); before returning, the action records its pid under ``test:inaction:<sourceId>`` and
  sleeps ``payload.sleepMs`` so a test can SIGKILL or SIGSTOP it mid-action (with ``payload.sleepAttempts``, on
  its first that many attempts only: a test that kills the first attempt need not wait out the redelivery's).
  When ``test:sleep-after:<sourceId>`` holds a number of ms, the handler of the built-in
  ``signal.action.applied`` signal records its pid under ``test:afteraction:<sourceId>`` and sleeps that
  long: the effect is committed, the event is not.
* ``test.timeline``: the source handler appends ``start`` and ``end`` records (scope, seq, time, pid) to
  ``test:timeline`` with ``payload.sleepMs`` between them.
* ``test.fail-action``: one action whose result is ``failed`` (retriable), never an exception.
* ``test.flaky``: raises until the key ``test:fixed`` exists (or, given ``payload.failTimes``, on its first
  that many attempts), then increments ``test:flaky-applied``; the error quotes ``payload.errorText``. Its
  payload schema (:class:`FlakyPayload`) types both, so a redrive's edited payload can be refused at the door.
  With ``payload.retryLaterS`` it raises ``RetryLater(delay_s=retryLaterS)`` instead.
* ``test.batch``: batch-safe (worker/drain/batch.py) source → signal → action; the source handler counts its runs
  under ``test:batch-runs:<sourceId>`` (instrumentation: speculative runs count too), records its pid under
  ``test:inbatch:<sourceId>`` and, with ``payload.waitGo``, waits (up to 60 s) for ``test:batch-go:<sourceId>``;
  the action stages ``payload.counterKey`` += 1 and an RPUSH of the source id onto ``test:batch-order`` (the
  order events committed in). With ``payload.idempotencyKey`` set, the action's lane is that key (two events,
  or with ``payload.twinActions`` two actions of one event, share it).
* ``test.two-step``: the source handler stages ``test:two-step-chain:<sourceId>`` += 1 and dispatches two actions.
  The first records ``test:two-step-started:<sourceId>``, waits (up to 60 s) for ``test:two-step-go:<sourceId>``,
  and stages ``test:two-step-first:<sourceId>`` += 1; the second stages ``test:two-step-second:<sourceId>`` += 1.
  With ``payload.firstOnly`` the first action is the only one; with ``payload.sourceOnly`` there is none, and the
  source handler itself records ``two-step-started`` and waits for ``two-step-go`` before it stages its write.
* the plugin task ``test.explode``: counts its runs under ``test:exploded``, then raises an error that quotes
  ``payload.text`` (as a task whose input fails to parse does); ``test.refuse`` counts its runs under
  ``test:refused`` and raises PermanentFailure. After their last attempt, their dead hook appends
  ``{"task", "text", "error"}`` to ``test:task-dead``; while ``test:dead-hook-fails`` is above zero, it takes
  one off and raises instead (a store that is down).
* ``test.fanout``: the source handler stages ``test:fanout-home`` += 1 (the tenant's home slot) and its scope's
  own ``fanout-local`` (``ctx.key``) += 1, and emits one ``test.counter`` follow-up to each scope of
  ``payload.to`` (source id ``<sourceId>:<scope>``, counter ``test:fanout:<sourceId>:<scope>``): with scope
  buckets, the first write and the follow-ups of other buckets are journaled (worker/store/journal.py).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field
from redis import Redis

from worker.plugin import (
    Action,
    Dispatch,
    ExecutorResult,
    HandlerContext,
    PermanentFailure,
    Plugin,
    PluginRuntime,
    PluginTask,
    Policy,
    RetryLater,
    Signal,
    Source,
    action_from,
    applied,
    define_action_handler,
    define_signal_handler,
    define_source_handler,
    failed,
    signal_from,
)

SOURCE_TYPES = (
    "test.counter",
    "test.timeline",
    "test.flaky",
    "test.fail-action",
    "test.two-step",
    "test.batch",
    "test.fanout",
)


class FlakyPayload(BaseModel):
    """``test.flaky``'s payload: ``failTimes`` (a count) and ``errorText`` when given; anything else passes."""

    model_config = ConfigDict(extra="allow")

    failTimes: int | None = Field(default=None, ge=0)
    errorText: str | None = None


@dataclass(frozen=True, slots=True)
class Probe:
    """Direct Redis access for test instrumentation (never for effects)."""

    redis: Redis


def _test_key(ctx: HandlerContext, name: str) -> str:
    """``test:<name>`` in the tenant's home slot (with scope buckets a staged write there is journaled)."""
    return f"{ctx.keys.home_prefix}test:{name}"


def _counter_source(source: Source, ctx: HandlerContext) -> Dispatch:
    return Dispatch(
        signals=[signal_from(source, "counter", "signal.test.counter", dict(source.payload), ctx.now())]
    )


def _counter_plan(signal: Signal, ctx: HandlerContext) -> Dispatch:
    return Dispatch(
        actions=[action_from(signal, "increment", "action.test.increment", dict(signal.payload), ctx.now())]
    )


def _counter_apply(action: Action, ctx: HandlerContext) -> ExecutorResult:
    redis = ctx.deps(Probe).redis
    # the attempt is counted before the pid is shown: a test that kills on seeing the pid finds it counted
    attempt = int(redis.incr(_test_key(ctx, f"attempts:{action.source.source_id}")))
    redis.set(_test_key(ctx, f"inaction:{action.source.source_id}"), os.getpid())
    if attempt <= int(action.payload.get("sleepAttempts", attempt)):
        time.sleep(int(action.payload.get("sleepMs", 0)) / 1000)
    ctx.effects.incr(str(action.payload["counterKey"]))
    return applied(action, ctx, detail="incremented")


def _after_applied(signal: Signal, ctx: HandlerContext) -> None:
    """Runs on every signal.action.applied: lets a test kill the worker after an effect committed."""
    sleep_ms = int(
        (
            signal.payload.get("detail") == "incremented"
            and ctx.deps(Probe).redis.get(_test_key(ctx, f"sleep-after:{signal.source.source_id}"))
        )
        or 0
    )
    if sleep_ms:
        ctx.deps(Probe).redis.set(_test_key(ctx, f"afteraction:{signal.source.source_id}"), os.getpid())
        time.sleep(sleep_ms / 1000)


def _timeline(source: Source, ctx: HandlerContext) -> None:
    redis = ctx.deps(Probe).redis
    key = _test_key(ctx, "timeline")
    base = {"scope": source.scope_key, "seq": source.payload.get("seq"), "pid": os.getpid()}
    redis.rpush(key, json.dumps({**base, "phase": "start", "t": time.time()}))
    time.sleep(int(source.payload.get("sleepMs", 0)) / 1000)
    redis.rpush(key, json.dumps({**base, "phase": "end", "t": time.time()}))


def _fanout(source: Source, ctx: HandlerContext) -> None:
    ctx.effects.incr(_test_key(ctx, "fanout-home"))
    ctx.effects.incr(ctx.key("fanout-local"))
    for scope in source.payload.get("to", []):
        counter = _test_key(ctx, f"fanout:{source.source_id}:{scope}")
        follow_up = {
            "sourceId": f"{source.source_id}:{scope}",
            "scopeKey": scope,
            "payload": {"counterKey": counter},
        }
        ctx.emit({"sourceType": "test.counter", **follow_up})


def _flaky(source: Source, ctx: HandlerContext) -> Dispatch:
    fail_times = source.payload.get("failTimes")
    if fail_times is not None:
        broken = ctx.attempt <= int(fail_times)
    else:
        broken = not ctx.deps(Probe).redis.exists(_test_key(ctx, "fixed"))
    if broken and source.payload.get("retryLaterS") is not None:
        raise RetryLater("asked to wait", delay_s=float(source.payload["retryLaterS"]))
    if broken:  # ``payload.errorText``: the error quotes its input, as a parser's error does
        quoted = source.payload.get("errorText")
        raise RuntimeError(f"flaky handler is broken: {quoted}" if quoted else "flaky handler is broken")
    return Dispatch(signals=[signal_from(source, "flaky", "signal.test.flaky", {}, ctx.now())])


def _flaky_plan(signal: Signal, ctx: HandlerContext) -> Dispatch:
    return Dispatch(actions=[action_from(signal, "apply", "action.test.flaky", {}, ctx.now())])


def _flaky_apply(action: Action, ctx: HandlerContext) -> ExecutorResult:
    ctx.effects.incr(_test_key(ctx, "flaky-applied"))
    return applied(action, ctx)


def _failing_source(source: Source, ctx: HandlerContext) -> Dispatch:
    sig = signal_from(source, "doomed", "signal.test.doomed", {}, ctx.now())
    return Dispatch(signals=[sig], actions=[action_from(sig, "write", "action.test.fail", {}, ctx.now())])


def _failing_action(action: Action, ctx: HandlerContext) -> ExecutorResult:
    return failed(
        action,
        ctx,
        "TEST_UPSTREAM_DOWN",
        "The upstream store is unavailable.",
        retriable=True,
        retry_after_ms=500,
    )


def _two_step_source(source: Source, ctx: HandlerContext) -> Dispatch:
    if source.payload.get("sourceOnly"):
        _wait_for_go(ctx, source.source_id)
    ctx.effects.incr(_test_key(ctx, f"two-step-chain:{source.source_id}"))
    sig = signal_from(source, "two-step", "signal.test.two-step", {}, ctx.now())
    if source.payload.get("sourceOnly"):
        return Dispatch(signals=[sig])
    first = action_from(sig, "first", "action.test.two-step-first", {}, ctx.now())
    if source.payload.get("firstOnly"):
        return Dispatch(signals=[sig], actions=[first])
    return Dispatch(
        signals=[sig],
        actions=[first, action_from(sig, "second", "action.test.two-step-second", {}, ctx.now())],
    )


def _wait_for_go(ctx: HandlerContext, source_id: str) -> None:
    redis = ctx.deps(Probe).redis
    redis.set(_test_key(ctx, f"two-step-started:{source_id}"), os.getpid())
    deadline = time.monotonic() + 60
    while not redis.exists(_test_key(ctx, f"two-step-go:{source_id}")) and time.monotonic() < deadline:
        time.sleep(0.02)


def _two_step_first(action: Action, ctx: HandlerContext) -> ExecutorResult:
    source_id = action.source.source_id
    _wait_for_go(ctx, source_id)
    ctx.effects.incr(_test_key(ctx, f"two-step-first:{source_id}"))
    return applied(action, ctx, detail="first")


def _two_step_second(action: Action, ctx: HandlerContext) -> ExecutorResult:
    ctx.effects.incr(_test_key(ctx, f"two-step-second:{action.source.source_id}"))
    return applied(action, ctx, detail="second")


def _batch_source(source: Source, ctx: HandlerContext) -> Dispatch:
    redis, source_id = ctx.deps(Probe).redis, source.source_id
    redis.incr(_test_key(ctx, f"batch-runs:{source_id}"))
    redis.set(_test_key(ctx, f"inbatch:{source_id}"), os.getpid())
    if source.payload.get("waitGo"):
        deadline = time.monotonic() + 60
        while not redis.exists(_test_key(ctx, f"batch-go:{source_id}")) and time.monotonic() < deadline:
            time.sleep(0.02)
    return Dispatch(
        signals=[signal_from(source, "batch", "signal.test.batch", dict(source.payload), ctx.now())]
    )


def _batch_plan(signal: Signal, ctx: HandlerContext) -> Dispatch:
    payload = {k: v for k, v in signal.payload.items() if k in ("counterKey", "idempotencyKey")}
    names = ("count", "count-again") if signal.payload.get("twinActions") else ("count",)
    return Dispatch(actions=[action_from(signal, n, "action.test.batch", payload, ctx.now()) for n in names])


def _batch_apply(action: Action, ctx: HandlerContext) -> ExecutorResult:
    ctx.effects.incr(str(action.payload["counterKey"]))
    ctx.effects.call("RPUSH", _test_key(ctx, "batch-order"), action.source.source_id)
    return applied(action, ctx, detail="batched")


def _probe(runtime: PluginRuntime) -> Probe:
    return Probe(runtime.redis)


def bundle() -> Plugin:
    """The test plugin: its policies, its probe, and its source types admitted at the door."""
    return Plugin(
        "tests",
        policies=_policies(),
        services=_probe,
        source_types=SOURCE_TYPES,
        payload_schemas={"test.flaky": FlakyPayload},
        tasks=[
            PluginTask(EXPLODE_TASK, _explode, dead=_task_dead),
            PluginTask(REFUSE_TASK, _refuse, dead=_task_dead),
            PluginTask(WHOSE_TASK, _whose, dead=_task_dead),
        ],
    )


EXPLODE_TASK = "test.explode"


REFUSE_TASK = "test.refuse"


WHOSE_TASK = "test.whose"


def _home(runtime: PluginRuntime, name: str) -> str:
    return f"{runtime.keys.for_tenant('default').home_prefix}test:{name}"


def _explode(runtime: PluginRuntime, payload: dict[str, object]) -> None:
    runtime.redis.incr(_home(runtime, "exploded"))
    raise RuntimeError(f"cannot handle {payload.get('text')!r}")


def _refuse(runtime: PluginRuntime, payload: dict[str, object]) -> None:
    runtime.redis.incr(_home(runtime, "refused"))
    raise PermanentFailure("no attempt will take this", code="TEST_REFUSED")


def _whose(runtime: PluginRuntime, payload: dict[str, object]) -> None:
    """Notes whose work each run is (worker.core.tenancy.work_tenant: from the message), failing the first run."""
    from worker.core.tenancy import work_tenant

    if runtime.redis.rpush(_home(runtime, "whose"), work_tenant() or "-") < 2:
        raise RuntimeError("the first run fails")


def _task_dead(runtime: PluginRuntime, payload: dict[str, object], error: str) -> None:
    if runtime.redis.decr(_home(runtime, "dead-hook-fails")) >= 0:  # a test set how many burials fail first
        raise ConnectionError("the dead list's store is unreachable")
    entry = {"task": payload.get("task"), "text": payload.get("text"), "error": error}
    runtime.redis.rpush(_home(runtime, "task-dead"), json.dumps(entry))


def _policies() -> list[Policy]:
    return [
        Policy(
            "tests",
            [
                define_source_handler("test.counter", "test.counter:source", _counter_source),
                define_signal_handler("signal.test.counter", "test.counter:plan", _counter_plan),
                define_action_handler("action.test.increment", "test.counter:apply", _counter_apply),
                # Declared batch-safe so that test.batch chains (whose applied actions reach it) can batch:
                # it only reads test:sleep-after, which tests set for test.counter events (never batched).
                define_signal_handler(
                    "signal.action.applied", "test.counter:after-applied", _after_applied, batch_safe=True
                ),
                define_source_handler("test.batch", "test.batch:source", _batch_source, batch_safe=True),
                define_signal_handler("signal.test.batch", "test.batch:plan", _batch_plan, batch_safe=True),
                define_action_handler("action.test.batch", "test.batch:apply", _batch_apply, batch_safe=True),
                define_source_handler("test.timeline", "test.timeline:source", _timeline),
                define_source_handler("test.fanout", "test.fanout:source", _fanout),
                define_source_handler("test.flaky", "test.flaky:source", _flaky),
                define_source_handler("test.fail-action", "test.fail-action:source", _failing_source),
                define_action_handler("action.test.fail", "test.fail-action:apply", _failing_action),
                define_signal_handler("signal.test.flaky", "test.flaky:plan", _flaky_plan),
                define_action_handler("action.test.flaky", "test.flaky:apply", _flaky_apply),
                define_source_handler("test.two-step", "test.two-step:source", _two_step_source),
                define_action_handler("action.test.two-step-first", "test.two-step:first", _two_step_first),
                define_action_handler(
                    "action.test.two-step-second", "test.two-step:second", _two_step_second
                ),
            ],
        )
    ]
