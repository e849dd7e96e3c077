"""A plugin with an external effect, written as a user would (it imports only ``worker.plugin``): the
action of a ``notify.send`` event (or a ``notify.ping`` one: the same signal and action) stages a webhook in the outbox; the plugin's deliverer POSTs it with the
record's key as ``Idempotency-Key`` (with ``payload.unbounded``, with no timeout: a receiver that never answers
holds the call until the relay's delivery timeout). With ``payload.sleepMs`` the action (first attempt only) records its pid
under ``ctx.key("probe")`` and sleeps, so a test can pause or partition the worker mid-action.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import httpx
from redis import Redis

from worker.plugin import (
    Action,
    Deliverer,
    Dispatch,
    ExecutorResult,
    HandlerContext,
    OutboxRecord,
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

SOURCE_TYPE = "notify.send"
PING_TYPE = (
    "notify.ping"  # a second source type with the same signal and action (its events may share sourceIds)
)
OUTBOX_KIND = "test-webhook"


@dataclass(frozen=True, slots=True)
class NotifyProbe:
    """Direct Redis access for the test's pid probe (instrumentation only)."""

    redis: Redis


def _on_send(source: Source, ctx: HandlerContext) -> Dispatch:
    return Dispatch(
        signals=[signal_from(source, "send", "signal.notify.send", dict(source.payload), ctx.now())]
    )


def _plan(signal: Signal, ctx: HandlerContext) -> Dispatch:
    return Dispatch(
        actions=[action_from(signal, "post", "action.notify.post", dict(signal.payload), ctx.now())]
    )


def _post(action: Action, ctx: HandlerContext) -> ExecutorResult:
    sleep_ms = int(action.payload.get("sleepMs") or 0)
    if sleep_ms and ctx.attempt == 1:
        ctx.deps(NotifyProbe).redis.set(ctx.key("probe"), os.getpid())
        time.sleep(sleep_ms / 1000)
    staged = {"url": action.payload["url"], "text": action.payload.get("text", "")}
    ctx.outbox(OUTBOX_KIND, {**staged, "unbounded": bool(action.payload.get("unbounded"))})
    return applied(action, ctx, detail="webhook staged")


def _deliverer(runtime: PluginRuntime) -> Deliverer:
    def deliver(record: OutboxRecord) -> None:
        body = {"text": record.payload.get("text", "")}
        headers = {"Idempotency-Key": record.key}
        # unbounded: a deliverer that forgot its timeout
        timeout_s = None if record.payload.get("unbounded") else 5
        httpx.post(
            str(record.payload["url"]), json=body, headers=headers, timeout=timeout_s
        ).raise_for_status()

    return deliver


def plugin() -> Plugin:
    """The notify plugin (its source type is admitted with AGENT_SIGNAL_EXTRA_SOURCE_TYPES by the test)."""
    policy = Policy(
        "notify",
        [
            define_source_handler(SOURCE_TYPE, "notify.send:signal", _on_send),
            define_source_handler(PING_TYPE, "notify.ping:signal", _on_send),
            define_signal_handler("signal.notify.send", "notify.send:plan", _plan),
            define_action_handler("action.notify.post", "notify.post:stage", _post),
        ],
    )
    return Plugin(
        "notify",
        policies=[policy],
        services=lambda runtime: NotifyProbe(runtime.redis),
        deliverers={OUTBOX_KIND: _deliverer},
    )
