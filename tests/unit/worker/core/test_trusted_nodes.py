"""worker/core/nodes.py's ``trusted`` and ``attempt_json``: where the engine copies a result with a new attempt, or
writes an attempt's JSON into a result signal, without pydantic's generic work, what it makes must be the very
node the validating constructors and ``model_copy`` made before, field for field."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from worker.chain.context import HandlerContext
from worker.chain.results import applied
from worker.chain.scheduler import _stamp_attempt
from worker.core.nodes import (
    Action,
    Attempt,
    ChainRef,
    ExecutorError,
    ExecutorResult,
    Signal,
    SignalRef,
    Source,
    action_from,
    result_signal,
    signal_from,
)

SOURCE = Source(
    source_id="msg_1",
    source_type="bot.message.merged",
    scope_key="topic:t1",
    timestamp=1_700_000_000_000,
    payload={"message": "hi", "nested": {"a": [1, 2]}},
    chain=ChainRef(chain_id="chain:msg_1", root_source_id="msg_1"),
    user_id="u1",
    event_id="evt_1",
)


def assert_same(made: BaseModel, validated: BaseModel) -> None:
    """Equal, and equal in everything pydantic keeps: field order, the fields named, extras, private state,
    the JSON; nested models too."""
    assert type(made) is type(validated)
    assert made == validated
    assert list(made.__dict__) == list(validated.__dict__)
    assert made.model_fields_set == validated.model_fields_set
    assert made.__pydantic_extra__ == validated.__pydantic_extra__
    assert made.__pydantic_private__ == validated.__pydantic_private__
    assert made.model_dump_json(by_alias=True) == validated.model_dump_json(by_alias=True)
    for name, value in made.__dict__.items():
        if isinstance(value, BaseModel):
            assert_same(value, validated.__dict__[name])


class TestWhatTheEngineMakesIsWhatValidationMade:
    def test_an_action_and_its_result_signal(self) -> None:
        signal = signal_from(SOURCE, "received", "signal.message.received", {}, 5)
        made = action_from(signal, "activity", "action.activity.record", {"field": "messages"}, 7)
        expected = Action(
            action_id=f"{signal.signal_id}:action:activity",
            action_type="action.activity.record",
            signal=SignalRef(signal_id=signal.signal_id, signal_type=signal.signal_type),
            source=signal.source,
            chain=ChainRef(
                chain_id="chain:msg_1",
                root_source_id="msg_1",
                parent_node_id=signal.signal_id,
                parent_signal_id=signal.signal_id,
            ),
            timestamp=7,
            payload={"field": "messages"},
        )
        assert_same(made, expected)
        attempt = Attempt(current=2, max=5, started_at=10, completed_at=12, status="failed")
        error = ExecutorError(code="E", message="m", retry_after_ms=3)
        for result in (
            ExecutorResult(action_id=made.action_id, status="applied", attempt=attempt, detail="d"),
            ExecutorResult(action_id=made.action_id, status="failed", attempt=attempt, error=error),
            ExecutorResult(
                action_id=made.action_id,
                status="skipped",
                attempt=Attempt(current=1, started_at=1, status="skipped"),
            ),
        ):
            payload: dict[str, Any] = {
                "actionId": made.action_id,
                "actionType": made.action_type,
                "attempt": result.attempt.to_json_dict(),
            }
            if result.detail is not None:
                payload["detail"] = result.detail
            if result.error is not None:
                payload["error"] = result.error.to_json_dict()
            chain = ChainRef(
                chain_id="chain:msg_1",
                root_source_id="msg_1",
                parent_node_id=made.action_id,
                parent_action_id=made.action_id,
            )
            expected_signal = Signal(
                signal_id=f"{made.action_id}:result",
                signal_type=f"signal.action.{result.status}",
                source=made.source,
                chain=chain,
                timestamp=9,
                payload=payload,
            )
            assert_same(result_signal(made, result, 9), expected_signal)

    def test_an_applied_result_and_its_stamped_attempt(self) -> None:
        signal = signal_from(SOURCE, "received", "signal.message.received", {}, 5)
        action = action_from(signal, "a", "action.a", {}, 6)
        ctx = HandlerContext(scope_key="topic:t1", node_timestamp=6, attempt=2, max_attempts=5)
        made = applied(action, ctx, detail="done", output={"k": 1})
        expected = ExecutorResult(
            action_id=action.action_id,
            status="applied",
            attempt=Attempt(current=2, max=5, started_at=0, status="succeeded"),
            detail="done",
            output={"k": 1},
        )
        assert_same(made, expected)
        stamped = _stamp_attempt(made, ctx, 100)
        assert_same(
            stamped,
            expected.model_copy(
                update={
                    "attempt": Attempt(
                        current=2,
                        max=5,
                        started_at=100,
                        completed_at=stamped.attempt.completed_at,
                        status="succeeded",
                    )
                }
            ),
        )
        assert made.attempt.started_at == 0  # the handler's result is not changed
