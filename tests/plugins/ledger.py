"""A plugin kept outside the packages, the way a user writes one: it imports only ``worker.plugin``.

Source type ``ledger.entry`` (admitted only through ``AGENT_SIGNAL_EXTRA_SOURCE_TYPES``): the source, signal
and action handlers each stage ``HINCRBY <ctx.key("ledger")> <stage> 1``. When ``payload.sleepMs`` is set,
the signal handler (first attempt only) records its pid under ``ctx.key("probe")`` — directly, as test
instrumentation — and sleeps, so a test can SIGKILL the worker between the staged write and the commit.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from redis import Redis

from worker.plugin import (
    Action,
    Dispatch,
    ExecutorResult,
    HandlerContext,
    Plugin,
    PluginRuntime,
    Policy,
    Signal,
    Source,
    action_from,
    applied,
    define_action_handler,
    define_signal_handler,
    define_source_handler,
    signal_from,
)

SOURCE_TYPE = "ledger.entry"


@dataclass(frozen=True, slots=True)
class LedgerProbe:
    """Direct Redis access for the test's pid probe (never for the ledger itself)."""

    redis: Redis


def _on_entry(source: Source, ctx: HandlerContext) -> Dispatch:
    ctx.effects.call("HINCRBY", ctx.key("ledger"), "source", 1)
    return Dispatch(
        signals=[signal_from(source, "entry", "signal.ledger.entry", dict(source.payload), ctx.now())]
    )


def _on_signal(signal: Signal, ctx: HandlerContext) -> Dispatch:
    ctx.effects.call("HINCRBY", ctx.key("ledger"), "signal", 1)
    sleep_ms = int(signal.payload.get("sleepMs") or 0)
    if sleep_ms and ctx.attempt == 1:
        ctx.deps(LedgerProbe).redis.set(ctx.key("probe"), os.getpid())
        time.sleep(sleep_ms / 1000)
    return Dispatch(actions=[action_from(signal, "book", "action.ledger.book", {}, ctx.now())])


def _book(action: Action, ctx: HandlerContext) -> ExecutorResult:
    ctx.effects.call("HINCRBY", ctx.key("ledger"), "action", 1)
    return applied(action, ctx, detail="booked")


def plugin() -> Plugin:
    """The ledger plugin (no ``source_types``: the test admits them with AGENT_SIGNAL_EXTRA_SOURCE_TYPES)."""

    def probe(runtime: PluginRuntime) -> LedgerProbe:
        return LedgerProbe(runtime.redis)

    policy = Policy(
        "ledger",
        [
            define_source_handler(SOURCE_TYPE, "ledger.entry:stage", _on_entry),
            define_signal_handler("signal.ledger.entry", "ledger.entry:plan", _on_signal),
            define_action_handler("action.ledger.book", "ledger.book:apply", _book),
        ],
    )
    return Plugin("ledger", policies=[policy], services=probe)
