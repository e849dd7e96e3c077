"""README's plugin example, whole: a source type, a signal, an idempotent action. Load it with
AGENT_SIGNAL_PLUGINS='["examples.welcome:plugin"]' from the checkout's root;
tests/integration/plugins/test_readme_example.py runs it through a real worker and checks that README shows
this very code."""

from pydantic import BaseModel

from worker.plugin import (
    Action,
    Dispatch,
    ExecutorResult,
    HandlerContext,
    Plugin,
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

SIGNED_UP = "app.user.signed_up"  # the source type: the door admits it because the plugin declares it


class SignedUp(BaseModel):  # the payload its handlers need: without a name, 422 naming payload.name
    name: str


def on_signup(source: Source, ctx: HandlerContext) -> Dispatch:  # a source event becomes a signal
    payload = {"name": source.payload["name"]}
    return Dispatch(signals=[signal_from(source, "new", "signal.user.new", payload, ctx.now())])


def plan(signal: Signal, ctx: HandlerContext) -> Dispatch:  # a signal becomes an action
    return Dispatch(actions=[action_from(signal, "welcome", "action.welcome", signal.payload, ctx.now())])


def welcome(action: Action, ctx: HandlerContext) -> ExecutorResult:  # runs once per idempotency key
    ctx.effects.call("RPUSH", ctx.key("welcomed"), action.payload["name"])  # committed with the key's mark
    return applied(action, ctx, detail=f"welcomed {action.payload['name']}")


def plugin() -> Plugin:
    handlers = [
        define_source_handler(SIGNED_UP, "welcome:new", on_signup),
        define_signal_handler("signal.user.new", "welcome:plan", plan),
        define_action_handler("action.welcome", "welcome:apply", welcome),
    ]
    return Plugin(
        "welcome",
        policies=[Policy("welcome", handlers)],
        source_types=[SIGNED_UP],
        payload_schemas={SIGNED_UP: SignedUp},
    )
