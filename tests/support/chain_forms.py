"""Chain documents in the stored forms of before, written the way the engine wrote them then, so tests can show
they still read (worker/documents/chain_storage.py reads every one; nothing in the engine writes them now)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic_core import to_json

from worker.core.nodes import Action, ExecutorResult, Signal, Source
from worker.documents.projection import envelope_metadata, payload_ids

__all__ = ["inputs_json"]


def inputs_json(
    source: Source,
    signals: Sequence[Signal],
    actions: Sequence[Action],
    results: Sequence[ExecutorResult],
    *,
    duration_ms: float | None,
    trace_id: str | None,
    metadata: dict[str, Any] | None,
) -> bytes:
    """The compact JSON of the ``inputs`` form (the module docstring) of the chain ``project_chain`` would
    project from the same arguments, without projecting: what a commit stored before issue 29 (still read). The nodes are serialised by pydantic-core in one pass (their ``to_json_dict`` form: camelCase,
    no None fields; plain dicts inside kept whole), keys in the envelope's order: a unit test compares the text
    with the projection's for chains of every outcome."""
    stored: dict[str, Any] = {
        "inputs": {
            "actions": actions,
            "metadata": envelope_metadata(source, payload_ids(source), metadata),
            "results": results,
            "signals": signals,
            "source": source,
        }
    }
    if duration_ms is not None:
        stored["durationMs"] = round(duration_ms, 3)
    if trace_id is not None:
        stored["traceId"] = trace_id
    return to_json(stored, by_alias=True, exclude_none=True)
