"""The chain's stored form (worker/documents/chain_storage.py): only the projection's inputs are kept, and a read projects
them again. What is read must be exactly what was projected when the chain ran, for chains of every outcome:
applied, failed (retriable or not), skipped, several actions, follow-up parents, a trace and an operation id,
terminal metadata. Compared as JSON text, so key order counts too."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.chain_forms import inputs_json
from worker.core.nodes import Action, ExecutorResult, Signal, Source
from worker.documents.chain_storage import rebuilt_chain, stored_actions, stored_event_id, stored_inputs_json
from worker.documents.projection import project_chain

T0 = 1_796_000_000_000

_DERIVED = frozenset({"edges", "handlerRuns", "chainId", "rootSourceId", "version", "traceId"})
_RECORD_OWN = ("durationMs", "traceId")  # the record's fields that are not derived from the inputs


def stored_chain(projection: dict[str, Any]) -> dict[str, Any]:
    """The stored form as defined by the projection (worker/documents/chain_storage.py's docstring): the envelope without
    what is derived, under ``inputs``, and the record's own fields. What a commit stores must equal it."""
    stored: dict[str, Any] = {
        "inputs": {k: v for k, v in projection["envelope"].items() if k not in _DERIVED}
    }
    record = projection["record"]
    stored.update((name, record[name]) for name in _RECORD_OWN if name in record)
    return stored


def _source(payload: dict[str, Any], *, follow_up: bool = False) -> Source:
    chain: dict[str, Any] = {"chainId": "chain:s1", "rootSourceId": "s1"}
    if follow_up:
        chain = {"chainId": "chain:root", "rootSourceId": "root", "parentNodeId": "root:a1"}
    return Source.model_validate(
        {
            "sourceId": "s1",
            "sourceType": "agent.user.message",
            "scopeKey": "topic:t1",
            "timestamp": T0,
            "payload": payload,
            "chain": chain,
            "eventId": "evt_0123456789abcdef01234567",
            "userId": "u1",
        }
    )


def _signal(i: int, kind: str = "signal.message.received") -> Signal:
    return Signal.model_validate(
        {
            "signalId": f"s1:signal:{i}",
            "signalType": kind,
            "source": {"sourceId": "s1", "sourceType": "agent.user.message"},
            "chain": {"chainId": "chain:s1", "rootSourceId": "s1", "parentNodeId": "s1"},
            "timestamp": T0 + i,
            "payload": {"n": i, "ratio": 0.5, "tags": ["a", "b"], "nested": {"x": None}},
        }
    )


def _action(i: int) -> Action:
    return Action.model_validate(
        {
            "actionId": f"s1:signal:{i}:action:{i}",
            "actionType": f"action.kind.{i}",
            "signal": {"signalId": f"s1:signal:{i}", "signalType": "signal.message.received"},
            "source": {"sourceId": "s1", "sourceType": "agent.user.message"},
            "chain": {"chainId": "chain:s1", "rootSourceId": "s1", "parentNodeId": f"s1:signal:{i}"},
            "timestamp": T0 + 10 + i,
            "payload": {"field": "messages"},
        }
    )


def _result(i: int, status: str) -> ExecutorResult:
    data: dict[str, Any] = {
        "actionId": f"s1:signal:{i}:action:{i}",
        "status": status,
        "attempt": {
            "current": 1 + i % 2,
            "max": 5,
            "startedAt": T0 + 20,
            "completedAt": T0 + 27,
            "status": {"applied": "succeeded", "failed": "failed", "skipped": "skipped"}[status],
        },
    }
    if status == "failed":
        data["error"] = {"code": "BOOM", "message": "it broke", "retriable": i % 2 == 0, "retryAfterMs": 50}
    else:
        data["detail"] = f"done {i}"
        data["output"] = {"written": i}
    return ExecutorResult.model_validate(data)


CASES = {
    "applied": (
        {"message": "hi, ça va ✓", "n": 1.5e-7, "big": 12345678901234567890},
        1,
        ["applied"],
        None,
        None,
        {"status": "completed"},
    ),
    "failed and skipped": (
        {},
        3,
        ["applied", "failed", "skipped"],
        12.3456,
        "0af7651916cd43dd8448eb211c80319c",
        {},
    ),
    "operation id": (
        {"operationId": "op_1", "agentId": "a1", "topicId": "t1"},
        2,
        ["applied", "applied"],
        3.0,
        "0af7651916cd43dd8448eb211c80319c",
        {"terminal": {"kind": "conclude", "reason": "r"}},
    ),
    "no actions": ({"message": "x"}, 0, [], 0.5, None, {"status": "completed"}),
}


def chain_args(case: str, follow_up: bool) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The projection's arguments for one of :data:`CASES` (nodes built by hand, as a plugin may)."""
    payload, n, statuses, duration_ms, trace_id, extra = CASES[case]
    signals = [_signal(i) for i in range(max(n, 1))]
    actions = [_action(i) for i in range(n)]
    results = [_result(i, s) for i, s in enumerate(statuses)]
    metadata = {"eventId": "evt_0123456789abcdef01234567", "attempt": 2, **extra}
    args = (_source(payload, follow_up=follow_up), signals, actions, results)
    return args, {"duration_ms": duration_ms, "trace_id": trace_id, "metadata": metadata}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("follow_up", [False, True])
def test_a_stored_chain_reads_back_as_it_was_projected(case: str, follow_up: bool) -> None:
    """What a commit stores (the nodes form) reads back as the projection made when the chain ran."""
    args, kwargs = chain_args(case, follow_up)
    projection = project_chain(*args, **kwargs)
    stored = json.loads(stored_inputs_json(*args, **kwargs))
    assert "nodes" in stored and "inputs" not in stored
    assert "eventId" not in stored["nodes"].get("metadata", {})  # the chain's key ends with it
    event_id = kwargs["metadata"]["eventId"]
    assert json.dumps(rebuilt_chain(stored, event_id)) == json.dumps(projection)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("follow_up", [False, True])
def test_a_chain_stored_in_the_inputs_form_still_reads(case: str, follow_up: bool) -> None:
    """The ``inputs`` form of before issue 29 (whole nodes): written as the projection defines it, read back
    as projected."""
    args, kwargs = chain_args(case, follow_up)
    projection = project_chain(*args, **kwargs)
    text = json.dumps(stored_chain(projection), separators=(",", ":"), ensure_ascii=False)
    # What a commit stored is serialised from the nodes without projecting: the same text.
    direct = inputs_json(*args, **kwargs)
    # Equal as text once parsed and printed the same way (pydantic-core spells 1.5e-07 as 1.5e-7): same keys,
    # same order, same values.
    assert json.dumps(json.loads(direct), separators=(",", ":"), ensure_ascii=False) == text
    assert "edges" not in text and "handlerRuns" not in text and '"record"' not in text
    assert json.dumps(rebuilt_chain(json.loads(text))) == json.dumps(projection)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("form", ["nodes", "inputs", "whole"])
def test_the_actions_read_without_projecting_are_the_documents(case: str, form: str) -> None:
    """Erasure reads a chain's source and actions (its lanes) without projecting it: the same actions, in the same
    order, as the rebuilt document's envelope, in each stored form; the source as the projection's."""
    args, kwargs = chain_args(case, follow_up=False)
    projection = project_chain(*args, **kwargs)
    event_id = kwargs["metadata"]["eventId"]
    stored = {
        "nodes": json.loads(stored_inputs_json(*args, **kwargs)),
        "inputs": stored_chain(projection),
        "whole": projection,
    }[form]
    source, actions = stored_actions(stored, event_id)
    want = [Action.model_validate(a) for a in rebuilt_chain(stored, event_id)["envelope"]["actions"]]
    assert actions == want and len(want) == len(args[2])
    assert source == (None if form == "whole" else args[0])
    with pytest.raises(ValueError, match="stored chain inputs do not rebuild"):
        stored_actions({"nodes": {"source": {"sourceId": "s"}}})


def test_a_whole_document_of_before_reads_as_it_is() -> None:
    whole = {"envelope": {"chainId": "chain:x"}, "record": {"chainId": "chain:x"}}
    assert rebuilt_chain(whole) == whole


def test_inputs_that_are_not_a_chain_name_the_problem() -> None:
    with pytest.raises(ValueError, match="stored chain inputs do not rebuild"):
        rebuilt_chain({"inputs": {"source": {"sourceId": "s"}}})


def test_the_event_id_is_read_from_either_form_without_rebuilding() -> None:
    """Erasure asks whose chain it is: answered from the stored metadata, even when the inputs would not
    rebuild, and for a whole document of before."""
    broken = {"inputs": {"metadata": {"eventId": "evt_1"}, "source": {"sourceId": "s"}}}
    assert stored_event_id(broken) == "evt_1"
    assert stored_event_id({"envelope": {"metadata": {"eventId": "evt_2"}}, "record": {}}) == "evt_2"
    assert stored_event_id({"inputs": {"metadata": {"eventId": 7}}}) is None
    assert stored_event_id({"something": "else"}) is None
