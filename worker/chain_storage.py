"""What of a chain document is stored, and the whole document rebuilt from it on read.

LobeHub's ``{"envelope", "record"}`` is mostly derived: the envelope's ``edges``, ``handlerRuns``, ``chainId``,
``rootSourceId`` and ``version``, and the whole record (summary, conclusion, final action), are functions
of the source, its signals, actions and results (:func:`worker.projection.project_chain`). So the stored
form keeps those inputs and the envelope's ``metadata`` under ``inputs``, next to the two record fields that
are not derived (``durationMs`` and the trace's ``traceId``; the envelope's ``traceId`` is the payload's
operation id or that trace id); a read projects them again with the same function,
so what is read is what was projected when the chain ran (a unit test checks that on chains of every
outcome). A chain keeps 330 of its 490 compressed bytes.

A document written before (it has a ``record``) reads as it is.
"""

from __future__ import annotations

from typing import Any

from worker.nodes import Action, ExecutorResult, Signal, Source
from worker.projection import project_chain

__all__ = ["rebuilt_chain", "stored_chain"]

_DERIVED = frozenset({"edges", "handlerRuns", "chainId", "rootSourceId", "version", "traceId"})
_RECORD_OWN = ("durationMs", "traceId")  # the record's fields that are not derived from the inputs


def stored_chain(projection: dict[str, Any]) -> dict[str, Any]:
    """The stored form of a chain's projection (``{"envelope", "record"}``)."""
    stored: dict[str, Any] = {
        "inputs": {k: v for k, v in projection["envelope"].items() if k not in _DERIVED}
    }
    record = projection["record"]
    stored.update((name, record[name]) for name in _RECORD_OWN if name in record)
    return stored


def rebuilt_chain(stored: dict[str, Any]) -> dict[str, Any]:
    """The chain document (``{"envelope", "record"}``) of its stored form; an older whole document as it is.
    ValueError when the stored inputs are not a chain's."""
    inputs = stored.get("inputs")
    if inputs is None:
        return stored
    try:
        return project_chain(
            Source.model_validate(inputs["source"]),
            [Signal.model_validate(s) for s in inputs["signals"]],
            [Action.model_validate(a) for a in inputs["actions"]],
            [ExecutorResult.model_validate(r) for r in inputs["results"]],
            duration_ms=stored.get("durationMs"),
            trace_id=stored.get("traceId"),
            metadata=inputs.get("metadata"),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"stored chain inputs do not rebuild: {exc}") from None
