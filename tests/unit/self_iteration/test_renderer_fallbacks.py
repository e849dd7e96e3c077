"""LobeHub's source renderers and memory filter, where an audit found us reading them differently: the unsafe-memory
words next to CJK letters (JS's ASCII-only ``\\b``), ``agent.user.message``'s ``messageId`` → ``userMessageId`` →
source id, and ``agent.execution.completed``'s ``operationId ?? sourceId`` (reference §2.2.2, §3.5)."""

from __future__ import annotations

from typing import Any

import pytest
from redis import Redis

from policies.self_iteration.deps import SelfIterationDeps
from policies.self_iteration.handlers.actions import UNSAFE_MEMORY, user_memory_handler
from policies.self_iteration.handlers.analyze_intent import satisfaction_judge
from policies.self_iteration.handlers.completion import completion_fanout
from worker.chain.context import Deps, EffectBuffer, HandlerContext
from worker.core.nodes import Action, ChainRef, Dispatch, ExecutorResult, Signal, SignalRef, Source, SourceRef
from worker.keys.layout import BucketKeys

SCOPE = "topic:tpc_1"


def _ctx(redis_client: Redis, keys: BucketKeys) -> HandlerContext:
    deps = SelfIterationDeps(redis=redis_client, enabled_by_default=True, runner=None)
    return HandlerContext(
        scope_key=SCOPE,
        node_timestamp=100,
        effects=EffectBuffer(keys=keys),
        keys=keys,
        deps_of=Deps({SelfIterationDeps: deps}),
        source=_source("msg_1", "agent.user.message"),  # the event's user, u1
    )


def _source(source_id: str, source_type: str, **payload: Any) -> Source:
    return Source(
        source_id=source_id,
        source_type=source_type,
        scope_key=SCOPE,
        timestamp=1,
        payload=payload,
        chain=ChainRef(chain_id=f"chain:{source_id}", root_source_id=source_id),
        user_id="u1",
    )


def _memory_action(message: str) -> Action:
    return Action(
        action_id="msg_1:memory",
        action_type="action.user-memory.handle",
        signal=SignalRef(signal_id="sig_1", signal_type="signal.feedback.domain.memory"),
        source=SourceRef(source_id="msg_1", source_type="agent.user.message"),
        chain=ChainRef(chain_id="chain:msg_1", root_source_id="msg_1"),
        timestamp=1,
        payload={
            "agentId": "agt_1",
            "idempotencyKey": "msg_1:memory:msg_1",
            "message": message,
            "messageId": "msg_1",
        },
    )


class TestUnsafeMemoryNextToCjk:
    """JS's ``/\\bmaybe\\b/i`` sees a word boundary between a CJK letter and ``maybe``; Python's Unicode ``\\b`` did not."""

    @pytest.mark.parametrize("message", ["我maybe更喜欢简洁的回答", "以后关于health的问题请简短"])
    def test_an_unsafe_word_between_cjk_letters_fails_the_memory_write(
        self, redis_client: Redis, keys: BucketKeys, message: str
    ) -> None:
        """The memory action fails as LobeHub's does and stages no run."""
        ctx = _ctx(redis_client, keys)
        result = user_memory_handler(_memory_action(message), ctx)
        assert isinstance(result, ExecutorResult) and result.error is not None
        assert (result.status, result.error.code, result.error.message) == (
            "failed",
            "USER_MEMORY_EXECUTION_FAILED",
            "Memory candidate is not safe for automatic write",
        )
        assert not ctx.effects

    @pytest.mark.parametrize(
        ("message", "unsafe"),
        [
            ("Maybe shorter answers", True),
            ("HEALTH questions: short", True),
            ("maybe_later", False),  # "_" is a word character in JS too
            ("maybe2", False),
            ("unhealthy snacks", False),
            ("éhealth", True),  # é is no JS word character
            ("relationſhip", False),  # JS's /i does not fold the long s onto an ASCII s
        ],
    )
    def test_the_patterns_match_as_the_js_ones_do(self, message: str, unsafe: bool) -> None:
        """ASCII word boundaries and ASCII-only case folding, like JS's ``\\b`` and ``/i`` without ``u``."""
        assert any(p.search(message) for p in UNSAFE_MEMORY) is unsafe


class TestUserMessageIdFallback:
    """``agent.user.message``: ``messageId`` → ``userMessageId`` → source id (LobeHub's renderer)."""

    def _judged_message_id(self, redis_client: Redis, keys: BucketKeys, **payload: Any) -> Any:
        source = _source("asst_9:completion:msg_u1", "agent.user.message", **payload)
        result = satisfaction_judge(source, _ctx(redis_client, keys))
        assert isinstance(result, Dispatch)
        signal: Signal = result.signals[0]
        return signal.payload["messageId"]

    def test_the_user_message_id_names_the_feedback(self, redis_client: Redis, keys: BucketKeys) -> None:
        """A hydrated completion names its user message ``userMessageId``: the feedback is that message's."""
        message = "Going forward, I prefer concise answers."
        assert (
            self._judged_message_id(redis_client, keys, message=message, userMessageId="msg_u1") == "msg_u1"
        )

    @pytest.mark.parametrize(
        ("ids", "expected"),
        [
            ({"messageId": "msg_m", "userMessageId": "msg_u1"}, "msg_m"),
            ({"messageId": "", "userMessageId": "msg_u1"}, "msg_u1"),
            ({"userMessageId": 7}, "asst_9:completion:msg_u1"),
            ({}, "asst_9:completion:msg_u1"),
        ],
    )
    def test_the_order_of_the_fallback(
        self, redis_client: Redis, keys: BucketKeys, ids: dict[str, Any], expected: str
    ) -> None:
        """``messageId`` first; an empty or non-string id is absent; the source id last."""
        message = "Going forward, I prefer concise answers."
        assert self._judged_message_id(redis_client, keys, message=message, **ids) == expected


def _completion(**payload: Any) -> Dispatch | None:
    base = {
        "agentId": "agt_1",
        "topicId": "tpc_1",
        "selfIteration": {
            "mutations": [{"apiName": "writeMemory", "data": {"status": "applied"}}],
            "artifacts": [],
        },
    }
    source = _source("op_1:complete:done", "agent.execution.completed", **base, **payload)
    result = completion_fanout(source, HandlerContext(scope_key=SCOPE, node_timestamp=1000))
    assert result is None or isinstance(result, Dispatch)
    return result


class TestOperationIdFallback:
    """``agent.execution.completed``: ``String(payload.operationId ?? sourceId)`` (LobeHub's renderer)."""

    def test_a_completion_without_an_operation_id_takes_the_source_id(self) -> None:
        """No operationId and no marker sourceId: the receipts are named after the source id."""
        result = _completion()
        assert result is not None
        receipts = [a.payload["receipt"] for a in result.actions]
        memory = next(r for r in receipts if r["kind"] == "memory")
        assert memory["id"] == "op_1:complete:done:writeMemory:0:memory"
        assert {r["operationId"] for r in receipts} == {"op_1:complete:done"}

    def test_an_empty_operation_id_still_skips(self) -> None:
        """JS's ``??`` keeps ``""``, and the completion policy's ``!operationId`` then skips."""
        assert _completion(operationId="") is None
