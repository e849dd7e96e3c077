"""worker/core/nodes.py's ``trusted`` and ``attempt_json``: where the engine builds its own nodes (a source's ref,
signals, actions, their chain refs, result signals, applied and skipped results) or copies a result with a new
attempt without pydantic's generic work, what it makes must be the very node the validating constructors and
``model_copy`` made before, field for field; and what a plugin passes is still validated."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from worker.chain.context import HandlerContext
from worker.chain.results import applied, skipped
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
    SourceRef,
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

    def test_a_signal_of_a_signal_and_a_skipped_result(self) -> None:
        parent = signal_from(SOURCE, "received", "signal.message.received", {"n": 1}, 5)
        made = signal_from(parent, "memory", "signal.memory", {"k": [1]}, 6)
        expected = Signal(
            signal_id=f"{parent.signal_id}:memory",
            signal_type="signal.memory",
            source=SOURCE.ref,
            chain=ChainRef(
                chain_id="chain:msg_1",
                root_source_id="msg_1",
                parent_node_id=parent.signal_id,
                parent_signal_id=parent.signal_id,
            ),
            timestamp=6,
            payload={"k": [1]},
        )
        assert_same(made, expected)
        assert_same(SOURCE.ref, SourceRef(source_id="msg_1", source_type="bot.message.merged"))
        action = action_from(made, "a", "action.a", {}, 7)
        ctx = HandlerContext(scope_key="topic:t1", node_timestamp=7, attempt=1, max_attempts=3)
        expected_result = ExecutorResult(
            action_id=action.action_id,
            status="skipped",
            attempt=Attempt(current=1, max=3, started_at=0, status="skipped"),
            detail="nothing to do",
        )
        assert_same(skipped(action, ctx, "nothing to do"), expected_result)
        for detail in (None, "done"):  # output left out: the constructor named it (None) all the same
            expected_applied = ExecutorResult(
                action_id=action.action_id,
                status="applied",
                attempt=Attempt(current=1, max=3, started_at=0, status="succeeded"),
                detail=detail,
                output=None,
            )
            assert_same(applied(action, ctx, detail), expected_applied)


class TestWhatAPluginPassesIsStillValidated:
    """A handler's type, payload, timestamp, detail or output that validation would change or refuse goes
    through the validating constructor: the same node, or the same refusal, as before."""

    def test_coerced_values_are_what_validation_made(self) -> None:
        made = signal_from(SOURCE, "received", "signal.message.received", {}, 5.0)  # type: ignore[arg-type]
        assert made.timestamp == 5 and type(made.timestamp) is int

    @pytest.mark.parametrize(
        ("kind", "payload", "timestamp"),
        [
            (7, {}, 5),  # a type that is not a str
            ("signal.x", {1: "a"}, 5),  # a key that is not a str
            ("signal.x", ["a"], 5),  # a payload that is not an object
            ("signal.x", {}, "soon"),  # a timestamp that is not a number
        ],
    )
    def test_refused_values_are_refused(self, kind: Any, payload: Any, timestamp: Any) -> None:
        with pytest.raises(ValidationError):
            signal_from(SOURCE, "received", kind, payload, timestamp)
        signal = signal_from(SOURCE, "received", "signal.message.received", {}, 5)
        with pytest.raises(ValidationError):
            action_from(signal, "a", kind, payload, timestamp)

    def test_a_result_with_output_that_is_not_an_object_is_refused(self) -> None:
        signal = signal_from(SOURCE, "received", "signal.message.received", {}, 5)
        action = action_from(signal, "a", "action.a", {}, 6)
        ctx = HandlerContext(scope_key="topic:t1", node_timestamp=6, attempt=1, max_attempts=3)
        with pytest.raises(ValidationError):
            applied(action, ctx, detail="d", output=["not", "an", "object"])  # type: ignore[arg-type]
        with pytest.raises(ValidationError):
            applied(action, ctx, detail=3)  # type: ignore[arg-type]

    def test_a_payload_is_copied_as_validation_copies_it(self) -> None:
        payload = {"a": 1}
        made = signal_from(SOURCE, "received", "signal.message.received", payload, 5)
        payload["b"] = 2
        assert made.payload == {"a": 1}
        output = {"k": 1}
        signal = signal_from(SOURCE, "received", "signal.message.received", {}, 5)
        action = action_from(signal, "a", "action.a", {}, 6)
        ctx = HandlerContext(scope_key="topic:t1", node_timestamp=6, attempt=1, max_attempts=3)
        result = applied(action, ctx, output=output)
        output["j"] = 2
        assert result.output == {"k": 1}
