"""A plugin kept outside the packages: an order is charged (an action that applies), then shipped (an action
that raises until the key ``ctx.key("shipping-fixed")`` exists), so the event dies with its charge applied. With
``payload.planFailsFromAttempt: n`` its source handler raises from attempt n on, before any action; with
``payload.chargeKey`` the charge's ``payload.idempotencyKey`` is that key (orders that share one share a lane).

Source type ``charge.order`` (admitted through ``AGENT_SIGNAL_EXTRA_SOURCE_TYPES``); the charge stages
``INCR <ctx.key("charged")>``.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis import Redis

from worker.plugin import (
    Action,
    Dispatch,
    ExecutorResult,
    HandlerContext,
    PermanentFailure,
    Plugin,
    PluginRuntime,
    Policy,
    Source,
    action_from,
    applied,
    define_action_handler,
    define_source_handler,
    signal_from,
)

SOURCE_TYPE = "charge.order"
REFUND_TYPE = "charge.refund"  # planned as an order is: an event of it may share an order's sourceId


@dataclass(frozen=True, slots=True)
class ShippingProbe:
    """Reads whether shipping was fixed (test instrumentation)."""

    redis: Redis


def _on_order(source: Source, ctx: HandlerContext) -> Dispatch:
    failing_from = source.payload.get("planFailsFromAttempt")
    if isinstance(failing_from, int) and ctx.attempt >= failing_from:
        raise RuntimeError("the order planner is down")  # before any action: this attempt looks no lane up
    if source.payload.get(
        "stageRefusedWrite"
    ):  # an INCR of the ledger hash: its commit refuses it, WRONGTYPE
        ctx.effects.call("INCR", ctx.key("ledger"))
    signal = signal_from(source, "order", "signal.charge.order", {}, ctx.now())
    charge_key = source.payload.get("chargeKey")
    charge = {"idempotencyKey": charge_key} if isinstance(charge_key, str) else {}
    return Dispatch(
        signals=[signal],
        actions=[
            action_from(signal, "charge", "action.charge.charge", charge, ctx.now()),
            action_from(signal, "ship", "action.charge.ship", {}, ctx.now()),
        ],
    )


def _charge(action: Action, ctx: HandlerContext) -> ExecutorResult:
    ctx.effects.incr(ctx.key("charged"))
    return applied(action, ctx, detail="charged")


def _ship(action: Action, ctx: HandlerContext) -> ExecutorResult:
    if not ctx.deps(ShippingProbe).redis.exists(ctx.key("shipping-fixed")):
        if ctx.source is not None and ctx.source.payload.get("workerDies"):
            raise SystemExit("the worker died mid-event")  # no commit: as a killed worker leaves it
        raise RuntimeError("shipping is down")
    return applied(action, ctx, detail="shipped")


def _ship_unless_told(action: Action, ctx: HandlerContext) -> ExecutorResult:
    """Batch-safe: reads nothing; fails for good (dead at once) when the order's payload says ``shippingDown``."""
    if ctx.source is not None and ctx.source.payload.get("shippingDown"):
        raise PermanentFailure("shipping is down for this order")
    ctx.effects.call("HINCRBY", ctx.key("ledger"), "shipped", 1)  # fails at commit if the field is no number
    return applied(action, ctx, detail="shipped")


def plugin() -> Plugin:
    """The charge plugin (it declares ``charge.refund``; each test admits ``charge.order`` with
    AGENT_SIGNAL_EXTRA_SOURCE_TYPES)."""

    def probe(runtime: PluginRuntime) -> ShippingProbe:
        return ShippingProbe(runtime.redis)

    policy = Policy(
        "charge",
        [
            define_source_handler(SOURCE_TYPE, "charge.order:plan", _on_order),
            define_source_handler(REFUND_TYPE, "charge.refund:plan", _on_order),  # the same actions
            define_action_handler("action.charge.charge", "charge.charge:apply", _charge),
            define_action_handler("action.charge.ship", "charge.ship:apply", _ship),
        ],
    )
    return Plugin("charge", policies=[policy], services=probe, source_types=[REFUND_TYPE])


def batch_plugin() -> Plugin:
    """The same, every handler batch-safe (its events commit in runs of several): shipping fails when the order's
    payload says ``shippingDown``."""
    policy = Policy(
        "charge",
        [
            define_source_handler(SOURCE_TYPE, "charge.order:plan", _on_order, batch_safe=True),
            define_action_handler("action.charge.charge", "charge.charge:apply", _charge, batch_safe=True),
            define_action_handler(
                "action.charge.ship", "charge.ship:apply", _ship_unless_told, batch_safe=True
            ),
        ],
    )
    return Plugin("charge", policies=[policy])
