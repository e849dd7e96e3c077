"""The chain scheduler as a pure function (an in-memory ActionPort stands in for Redis here; the Redis
port is covered by tests/integration)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from worker.chain.context import EffectBuffer, HandlerContext
from worker.chain.registry import (
    Policy,
    Registry,
    define_action_handler,
    define_signal_handler,
    define_source_handler,
)
from worker.chain.results import applied, failed, skipped
from worker.chain.scheduler import ChainScope, run_chain
from worker.core.errors import LeaseLost, PermanentFailure
from worker.core.nodes import (
    Action,
    ChainRef,
    Conclude,
    Dispatch,
    ExecutorResult,
    Signal,
    Source,
    Wait,
    action_from,
    signal_from,
)


class MemoryPort:
    """In-memory idempotency lanes for unit tests."""

    def __init__(self) -> None:
        self.lanes: dict[str, ExecutorResult] = {}
        self.effects: list[list[Any]] = []
        self.live = True

    def lookup(
        self, action: Action, idempotency_key: str, aliases: Sequence[str] = ()
    ) -> ExecutorResult | None:
        return next((self.lanes[k] for k in (idempotency_key, *aliases) if k in self.lanes), None)

    def commit(
        self, action: Action, idempotency_key: str, result: ExecutorResult, effects: EffectBuffer
    ) -> bool:
        if idempotency_key in self.lanes:
            return False
        self.effects.extend(effects.commands)
        self.lanes[idempotency_key] = result
        return True

    def ensure_live(self) -> None:
        if not self.live:
            raise LeaseLost("gone")


def _source(source_id: str = "msg_u1", source_type: str = "agent.user.message") -> Source:
    return Source(
        source_id=source_id,
        source_type=source_type,
        scope_key="topic:tpc_1",
        timestamp=1000,
        payload={"message": "hi"},
        chain=ChainRef(chain_id=f"chain:{source_id}", root_source_id=source_id),
    )


def _registry(*handlers: Any) -> Registry:
    return Registry.from_policies([Policy("p", list(handlers))])


class TestOrder:
    def test_breadth_first_signals_before_actions_and_registration_order(self) -> None:
        """Dispatch appends signals then actions at the tail; handlers of one type run in registration order."""
        calls: list[str] = []

        def src_a(s: Source, ctx: HandlerContext) -> Dispatch:
            calls.append("src_a")
            return Dispatch(signals=[signal_from(s, "a", "signal.a", {}, ctx.now())])

        def src_b(s: Source, ctx: HandlerContext) -> Dispatch:
            calls.append("src_b")
            sig = signal_from(s, "b", "signal.b", {}, ctx.now())
            return Dispatch(signals=[sig], actions=[action_from(sig, "x", "action.x", {}, ctx.now())])

        def on_a(sig: Signal, ctx: HandlerContext) -> Dispatch:
            calls.append("on_a")
            return Dispatch(signals=[signal_from(sig, "a2", "signal.a2", {}, ctx.now())])

        def on_b(sig: Signal, ctx: HandlerContext) -> None:
            calls.append("on_b")

        def act(a: Action, ctx: HandlerContext) -> ExecutorResult:
            calls.append("act")
            return applied(a, ctx, "done")

        def on_a2(sig: Signal, ctx: HandlerContext) -> None:
            calls.append("on_a2")

        registry = _registry(
            define_source_handler("agent.user.message", "h1", src_a),
            define_source_handler("agent.user.message", "h2", src_b),
            define_signal_handler("signal.a", "h3", on_a),
            define_signal_handler("signal.b", "h4", on_b),
            define_signal_handler("signal.a2", "h6", on_a2),
            define_action_handler("action.x", "h5", act),
        )
        trace = run_chain(_source(), registry, MemoryPort())
        assert calls == ["src_a", "src_b", "on_a", "on_b", "act", "on_a2"]
        assert [s.signal_type for s in trace.signals] == [
            "signal.a",
            "signal.b",
            "signal.a2",
            "signal.action.applied",
        ]
        assert [s.signal_id for s in trace.signals] == [
            "msg_u1:signal:a",
            "msg_u1:signal:b",
            "msg_u1:signal:a:a2",
            "msg_u1:signal:b:action:x:result",
        ]
        assert trace.status == "completed"

    def test_first_terminal_wins_and_queue_still_drains(self) -> None:
        """The first wait/schedule/conclude is the chain's result; already-queued work still runs."""
        ran: list[str] = []

        def src(s: Source, ctx: HandlerContext) -> Dispatch:
            return Dispatch(
                signals=[
                    signal_from(s, "1", "signal.one", {}, ctx.now()),
                    signal_from(s, "2", "signal.two", {}, ctx.now()),
                ]
            )

        def one(sig: Signal, ctx: HandlerContext) -> Conclude:
            ran.append("one")
            return Conclude(concluded={"reason": "first"})

        def two(sig: Signal, ctx: HandlerContext) -> Wait:
            ran.append("two")
            return Wait(pending={"lane": "x"})

        registry = _registry(
            define_source_handler("agent.user.message", "s", src),
            define_signal_handler("signal.one", "one", one),
            define_signal_handler("signal.two", "two", two),
        )
        trace = run_chain(_source(), registry, MemoryPort())
        assert ran == ["one", "two"]
        assert isinstance(trace.terminal, Conclude) and trace.terminal.concluded == {"reason": "first"}
        assert trace.status == "conclude"
        assert len(trace.signals) == 2  # kept whole, unlike LobeHub's empty trace for non-completed chains

    def test_handler_exception_aborts_and_is_recorded(self) -> None:
        """An exception propagates; the failed handler run is in the trace."""

        def boom(s: Source, ctx: HandlerContext) -> None:
            raise RuntimeError("boom")

        registry = _registry(define_source_handler("agent.user.message", "boom", boom))
        with pytest.raises(RuntimeError, match="boom"):
            run_chain(_source(), registry, MemoryPort())

    def test_fanout_budget(self) -> None:
        """A handler that keeps producing signals is stopped by the node budget."""

        def loop(sig: Signal | Source, ctx: HandlerContext) -> Dispatch:
            return Dispatch(signals=[signal_from(sig, "again", "signal.loop", {}, ctx.now())])  # type: ignore[arg-type]

        registry = _registry(
            define_source_handler("agent.user.message", "s", loop),
            define_signal_handler("signal.loop", "l", loop),
        )
        with pytest.raises(PermanentFailure, match="exceeded 50 nodes"):
            run_chain(_source(), registry, MemoryPort(), max_nodes=50)


class TestActions:
    @staticmethod
    def _registry(result: str, counter: list[int]) -> Registry:
        def src(s: Source, ctx: HandlerContext) -> Dispatch:
            sig = signal_from(s, "x", "signal.x", {}, ctx.now())
            return Dispatch(
                signals=[sig],
                actions=[action_from(sig, "do", "action.do", {"idempotencyKey": "k1"}, ctx.now())],
            )

        def act(a: Action, ctx: HandlerContext) -> ExecutorResult:
            counter.append(1)
            ctx.effects.incr("agent-signal:t:{default}:effect")
            if result == "applied":
                return applied(a, ctx, "Memory write enqueued.")
            if result == "skipped":
                return skipped(a, ctx, "nothing to do")
            return failed(
                a, ctx, "USER_MEMORY_EXECUTION_FAILED", "Memory candidate is not safe for automatic write"
            )

        return _registry(
            define_source_handler("agent.user.message", "s", src),
            define_action_handler("action.do", "a", act),
        )

    def test_applied_marks_lane_and_replay_does_not_rerun(self) -> None:
        """An applied action commits its effects once; a replayed chain reuses the stored result."""
        counter: list[int] = []
        port = MemoryPort()
        registry = self._registry("applied", counter)
        first = run_chain(_source(), registry, port, scope=ChainScope(attempt=1, max_attempts=3))
        second = run_chain(_source(), registry, port, scope=ChainScope(attempt=2, max_attempts=3))
        assert len(counter) == 1
        assert port.effects == [["INCRBY", "agent-signal:t:{default}:effect", 1]]
        assert first.results == second.results
        assert first.results[0].attempt.current == 1 and first.results[0].attempt.max == 3
        assert first.results[0].attempt.status == "succeeded"
        assert [s.signal_type for s in second.signals] == ["signal.x", "signal.action.applied"]
        assert second.signals[-1].payload["detail"] == "Memory write enqueued."

    @pytest.mark.parametrize("status", ["failed", "skipped"])
    def test_failed_or_skipped_never_mark_the_lane(self, status: str) -> None:
        """A failed or skipped result leaves the lane unmarked, so a later attempt runs the handler again."""
        counter: list[int] = []
        port = MemoryPort()
        registry = self._registry(status, counter)
        trace = run_chain(_source(), registry, port)
        run_chain(_source(), registry, port)
        assert len(counter) == 2
        assert port.lanes == {} and port.effects == []
        assert trace.signals[-1].signal_type == f"signal.action.{status}"
        if status == "failed":
            assert trace.results[0].error is not None
            assert trace.results[0].error.code == "USER_MEMORY_EXECUTION_FAILED"

    def test_lease_lost_stops_before_the_effect(self) -> None:
        """With the lease gone, the action handler does not run."""
        counter: list[int] = []
        port = MemoryPort()
        port.live = False
        with pytest.raises(LeaseLost):
            run_chain(_source(), self._registry("applied", counter), port)
        assert counter == []


class TestRegistration:
    def test_missing_function(self) -> None:
        """LobeHub's message for a definition without a function."""
        with pytest.raises(TypeError, match=r"Missing handler function for define_source_handler call\."):
            define_source_handler("x", "id", None)  # type: ignore[arg-type]

    def test_match_is_exact(self) -> None:
        """No wildcards: signal.a does not match signal.a.b."""
        h = define_signal_handler(["signal.a", "signal.c"], "h", lambda s, c: None)
        registry = _registry(h)
        assert registry.match("signal", "signal.a") == [h]
        assert registry.match("signal", "signal.c") == [h]
        assert registry.match("signal", "signal.a.b") == []


class TestChainScope:
    def test_source_and_signal_handlers_share_the_chain_buffer_and_actions_get_their_own(self) -> None:
        """Staged writes of source/signal handlers go to the event's commit; an action's to its own APPLY."""
        from worker.core.errors import PermanentFailure
        from worker.core.nodes import action_from, signal_from
        from worker.keys.layout import BucketKeys

        keys = BucketKeys("t:")
        emitted: list[object] = []
        scope = ChainScope(keys=keys, emit=lambda event: emitted.append(event) or "staged")
        source = _source()
        signal = signal_from(source, "s", "signal.x", {}, 1)
        action = action_from(signal, "a", "action.x", {}, 1)
        for node in (source, signal):
            ctx: HandlerContext = scope.context(source, node)
            assert ctx.effects is scope.effects and ctx.emit({"e": 1}) == "staged"
        action_ctx = scope.context(source, action)
        assert action_ctx.effects is not scope.effects and action_ctx.effects.keys == keys
        with pytest.raises(PermanentFailure, match="only source and signal handlers emit"):
            action_ctx.emit({"e": 2})
        assert len(emitted) == 2

    def test_staging_refuses_engine_keys_foreign_keys_and_reads(self) -> None:
        """A handler may stage only allow-listed writes on its deployment's own, non-engine keys."""
        from worker.chain.context import EffectBuffer
        from worker.core.errors import PermanentFailure
        from worker.keys.layout import BucketKeys

        keys = BucketKeys("t:")
        buffer = EffectBuffer(keys=keys)
        buffer.call("hset", keys.plugin("s", "x"), "f", "v")
        assert buffer.commands == [["HSET", "t:t:{default}:plugin:{s}:x", "f", "v"]]
        other_tenant = keys.for_tenant("acme").plugin("s", "x")
        for bad in (
            ("FLUSHALL", "t:x"),
            ("GET", "t:x"),
            ("DEL", keys.event("e1")),
            ("SET", "other:x", "1"),
            ("SET", "t:x", "1"),  # the deployment's prefix but no tenant's key
            ("HSET", other_tenant, "f", "v"),  # another tenant's key
            ("DEL", keys.plugin("s", "x"), other_tenant),  # DEL takes many keys: every one is checked
            ("DEL", keys.plugin("s", "x"), keys.event("e1")),
        ):
            with pytest.raises(PermanentFailure):
                buffer.call(*bad)
