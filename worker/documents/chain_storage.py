"""What of a chain document is stored, and the whole document rebuilt from it on read.

LobeHub's ``{"envelope", "record"}`` is mostly derived: the envelope's ``edges``, ``handlerRuns``, ``chainId``,
``rootSourceId`` and ``version``, and the whole record (summary, conclusion, final action), are functions
of the source, its signals, actions and results (:func:`worker.documents.projection.project_chain`). So the stored
form keeps those inputs and the envelope's ``metadata`` under ``inputs``, next to the two record fields that
are not derived (``durationMs`` and the trace's ``traceId``; the envelope's ``traceId`` is the payload's
operation id or that trace id); a read projects them again with the same function,
so what is read is what was projected when the chain ran (a unit test checks that on chains of every
outcome). A chain keeps 330 of its 490 compressed bytes. Since issue 29 the inputs are stored under ``nodes``
without what equals its default (:mod:`worker.documents.chain_nodes`): 240 bytes; the ``inputs`` form of before
(the nodes whole, the envelope's metadata) still reads (tests write it with tests/support/chain_forms.py).

A document written before (it has a ``record``) reads as it is. The stored inputs are the node models' JSON
(worker/core/nodes.py), so those models must keep reading what they wrote for as long as chains are retained, as
for any stored data; erasure reads the event id straight from the stored form (:func:`stored_event_id`), so a
chain that no longer rebuilds is still erased.

Upgrading: a worker or web process of before this form cannot read it (nor the compact event bodies and lanes
of worker/documents/event_body.py and worker/documents/lane_codec.py), so a deployment moves to it in one step (docs/operations.md).
"""

from __future__ import annotations

from typing import Any

from worker.core.nodes import Action, ExecutorResult, Signal, Source
from worker.documents.chain_nodes import NodeArgs, nodes_json, nodes_of, source_and_actions_of
from worker.documents.projection import project_chain

__all__ = ["rebuilt_chain", "stored_actions", "stored_event_id", "stored_inputs_json", "stored_source"]


# What a commit stores: the ``nodes`` form (:mod:`worker.documents.chain_nodes`).
stored_inputs_json = nodes_json


def stored_event_id(stored: dict[str, Any]) -> str | None:
    """The id of the event whose run wrote a stored chain (its metadata), without projecting it again:
    erasure asks this of every chain it may delete, and must not depend on the inputs still rebuilding."""
    holder = next((stored[k] for k in ("nodes", "inputs", "envelope") if k in stored), None)
    metadata = holder.get("metadata") if isinstance(holder, dict) else None
    found = metadata.get("eventId") if isinstance(metadata, dict) else None
    return found if isinstance(found, str) else None


def rebuilt_chain(stored: dict[str, Any], event_id: str | None = None) -> dict[str, Any]:
    """The chain document (``{"envelope", "record"}``) of its stored form; an older whole document as it is.
    ``event_id``: the event whose chain it is (the key's suffix; the ``nodes`` form leaves it out). ValueError
    when the stored inputs are not a chain's."""
    if "nodes" not in stored and "inputs" not in stored:
        return stored
    try:
        source, signals, actions, results, metadata = (
            nodes_of(stored["nodes"], event_id) if "nodes" in stored else _inputs_of(stored["inputs"])
        )
        return project_chain(
            source,
            signals,
            actions,
            results,
            duration_ms=stored.get("durationMs"),
            trace_id=stored.get("traceId"),
            metadata=metadata,
        )
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise ValueError(f"stored chain inputs do not rebuild: {exc}") from None


def stored_source(stored: dict[str, Any], event_id: str | None = None) -> Source:
    """The source event of a stored chain (ValueError when the stored form holds none: an older whole document,
    or not a chain's)."""
    try:
        if "nodes" in stored:
            return nodes_of(stored["nodes"], event_id)[0]
        if "inputs" in stored:
            return Source.model_validate(stored["inputs"]["source"])
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise ValueError(f"stored chain inputs do not rebuild: {exc}") from None
    raise ValueError("a whole chain document of before: its source is not kept apart")


def stored_actions(stored: dict[str, Any], event_id: str | None = None) -> tuple[Source | None, list[Action]]:
    """The source (None for a whole document of before, which keeps none apart) and the actions of a stored chain,
    without projecting it again or reading its signals and results (erasure asks this of each chain of a user);
    ValueError when the stored form is not a chain's."""
    try:
        if "nodes" in stored:
            meta = dict(stored["nodes"].get("metadata") or {})
            if event_id is not None and "eventId" not in meta:
                meta["eventId"] = event_id
            return source_and_actions_of(stored["nodes"], meta)
        if "inputs" in stored:
            inputs = stored["inputs"]
            return Source.model_validate(inputs["source"]), [
                Action.model_validate(a) for a in inputs["actions"]
            ]
        return None, [Action.model_validate(a) for a in stored["envelope"]["actions"]]
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise ValueError(f"stored chain inputs do not rebuild: {exc}") from None


def _inputs_of(inputs: dict[str, Any]) -> NodeArgs:
    """The nodes of the ``inputs`` form (whole nodes, the envelope's metadata)."""
    return (
        Source.model_validate(inputs["source"]),
        [Signal.model_validate(s) for s in inputs["signals"]],
        [Action.model_validate(a) for a in inputs["actions"]],
        [ExecutorResult.model_validate(r) for r in inputs["results"]],
        inputs.get("metadata") or {},
    )
