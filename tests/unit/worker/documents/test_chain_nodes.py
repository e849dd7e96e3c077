"""A chain's nodes as stored (worker/documents/chain_nodes.py): what equals the engine builders' default is left
out and put back on read, so a chain built by the builders reads back as it was projected, and a node built
some other way is kept whole."""

from __future__ import annotations

import json
from typing import Any

from tests.support.chain_forms import inputs_json
from worker.core.nodes import (
    Action,
    Attempt,
    ChainRef,
    ExecutorResult,
    Signal,
    Source,
    action_from,
    result_signal,
    signal_from,
)
from worker.documents.chain_codec import encode_chain
from worker.documents.chain_nodes import nodes_json
from worker.documents.chain_storage import rebuilt_chain
from worker.documents.projection import project_chain

T0 = 1_796_000_000_000
EVENT_ID = "evt_0123456789abcdef01234567"


def _source(chain: ChainRef | None = None) -> Source:
    return Source(
        source_id="msg-1",
        source_type="bot.message.merged",
        scope_key="topic:t1",
        timestamp=T0,
        payload={"message": "Going forward, I prefer concise answers.", "messageId": "msg-1"},
        chain=chain or ChainRef(chain_id="chain:msg-1", root_source_id="msg-1"),
        event_id=EVENT_ID,
        user_id="u1",
    )


def _run(
    source: Source, *, statuses: tuple[str, ...] = ("applied",)
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A run as the scheduler builds it: a signal of the source, a follow-up signal, one action per status
    (the first at the source's time) with its result and built-in result signal."""
    first = signal_from(source, "message-received", "signal.message.received", {"length": 40}, T0)
    second = signal_from(first, "domain:memory", "signal.memory.candidate", {"n": 1}, T0 + 3)
    signals, actions, results = [first, second], [], []
    for i, status in enumerate(statuses):
        action = action_from(second if i % 2 else first, f"a{i}", "action.activity.record", {"i": i}, T0 + i)
        attempt = Attempt(current=1, max=5, started_at=T0 + 9, completed_at=T0 + 11, status="succeeded")
        if status == "failed":
            attempt = attempt.model_copy(update={"status": "failed"})
        result = ExecutorResult(action_id=action.action_id, status=status, attempt=attempt, detail=f"did {i}")  # type: ignore[arg-type]
        actions.append(action)
        results.append(result)
        signals.append(result_signal(action, result, T0 + 12 + i))
    metadata = {"eventId": EVENT_ID, "attempt": 1, "status": "completed"}
    return (source, signals, actions, results), {"duration_ms": 0.25, "trace_id": None, "metadata": metadata}


def _reads_back(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    stored = json.loads(nodes_json(*args, **kwargs))
    assert json.dumps(rebuilt_chain(stored, EVENT_ID)) == json.dumps(project_chain(*args, **kwargs))
    return stored


class TestBuiltByTheEngine:
    def test_a_run_of_the_builders_reads_back_as_projected(self) -> None:
        """Signals, a follow-up signal, actions of either, results applied, skipped and failed."""
        _reads_back(*_run(_source(), statuses=("applied", "skipped", "failed")))

    def test_what_equals_its_default_is_left_out(self) -> None:
        """The source's root chain and event id, nodes' source, source-time timestamps and default chains,
        results' action ids, the built-in result signals (their time kept) and the metadata's event id (the
        chain's key ends with it) are not stored."""
        stored = _reads_back(*_run(_source()))["nodes"]
        assert "chain" not in stored["source"] and "eventId" not in stored["source"]
        first, follow_up, built_in = stored["signals"]
        assert set(first) == {"signalId", "signalType", "payload"}
        assert follow_up["chain"] == {"parentNodeId": first["signalId"], "parentSignalId": first["signalId"]}
        assert built_in == {"timestamp": T0 + 12}
        assert set(stored["actions"][0]) == {"actionId", "actionType", "signal", "payload"}
        assert "actionId" not in stored["results"][0]
        assert stored["metadata"] == {"attempt": 1, "status": "completed"}

    def test_it_stores_far_less_than_the_inputs_form(self) -> None:
        """The point of it: a third fewer bytes stored than the whole nodes (issue 29)."""
        args, kwargs = _run(_source())
        assert (
            len(encode_chain(nodes_json(*args, **kwargs)))
            < len(encode_chain(inputs_json(*args, **kwargs))) * 0.75
        )


class TestBuiltOtherwise:
    def test_a_follow_up_event_keeps_its_chain(self) -> None:
        """A source whose chain is not a root's (a follow-up) keeps it, and its nodes read back."""
        chain = ChainRef(chain_id="chain:root", root_source_id="root", parent_node_id="root:a1")
        stored = _reads_back(*_run(_source(chain)))["nodes"]
        assert stored["source"]["chain"] == chain.to_json_dict()

    def test_nodes_that_differ_from_the_defaults_are_kept(self) -> None:
        """Another source, other times, another chain, a result signal with its own payload, a result of no
        action: each kept as it is and read back."""
        source = _source()
        (src, signals, actions, results), kwargs = _run(source)
        other_ref = {"sourceId": "elsewhere", "sourceType": "x.y"}
        odd_signal = Signal.model_validate(
            {**signals[0].to_json_dict(), "source": other_ref, "chain": {"chainId": "c", "rootSourceId": "r"}}
        )
        odd_result_signal = signals[2].model_copy(update={"payload": {"custom": True}})
        odd_action = Action.model_validate({**actions[0].to_json_dict(), "timestamp": T0 + 99})
        lone = ExecutorResult(
            action_id="nowhere", status="applied", attempt=results[0].attempt, detail="no action of mine"
        )
        args = (src, [odd_signal, signals[1], odd_result_signal], [odd_action], [results[0], lone])
        stored = _reads_back(args, kwargs)["nodes"]
        assert stored["signals"][0]["source"] == other_ref
        assert stored["signals"][2]["payload"] == {"custom": True}
        assert stored["actions"][0]["timestamp"] == T0 + 99
        assert stored["results"][1]["actionId"] == "nowhere"
