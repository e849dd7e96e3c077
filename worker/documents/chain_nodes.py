"""A chain's nodes as they are stored: every field that holds what the engine's node builders would give it is
left out, and a read puts it back (issue 29: a chain's stored form shrank from 367 to about 240 bytes).

Left out, each only when it equals its default (so a node a handler built some other way is kept as it is):

* the source's ``chain`` when it is a root's (``chain:<sourceId>`` rooted at the source), and its ``eventId``
  (the metadata's);
* a signal's or action's ``source`` when it is the chain's source, its ``timestamp`` when it is the source's,
  and in its ``chain`` the ``chainId`` and ``rootSourceId`` when they are the source's; the whole ``chain`` when
  the parents are what :func:`~worker.core.nodes.signal_from` gives a signal of the source (parent node: the
  source) or :func:`~worker.core.nodes.action_from` gives an action (parent node and signal: its signal);
* a result's ``actionId`` when it is the action's at the same position;
* a built-in result signal (:func:`~worker.core.nodes.result_signal`) whole but for its ``timestamp``: the
  result signals left out follow the results in order (the first one left out is the first result's);
* in the metadata, what the projection derives from the source (:func:`~worker.documents.projection.envelope_metadata`),
  and the event id: the chain's key ends with it (``chain:<eventId>``), and the reader passes it back.

The stored nodes are the node models' JSON (worker/core/nodes.py) under ``nodes``; a unit test rebuilds chains
of every outcome and shape (follow-ups, several actions, nodes built by hand) and compares them with what was
projected when the chain ran.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic_core import to_json

from worker.core.nodes import Action, ExecutorResult, Signal, Source, attempt_json, result_signal

__all__ = ["NodeArgs", "nodes_json", "nodes_of"]

NodeArgs = tuple[Source, list[Signal], list[Action], list[ExecutorResult], dict[str, Any]]
_RESULT_SUFFIX = ":result"
_ROOT_IDS = {"chain_id": True, "root_source_id": True}
_BUILT_IN_SIGNAL = {"signal_id": True, "signal_type": True, "source": True, "chain": True, "payload": True}


def _is_root_chain(source: Source) -> bool:
    c = source.chain
    return (
        c.chain_id == f"chain:{source.source_id}"
        and c.root_source_id == source.source_id
        and c.parent_node_id is None
        and c.parent_signal_id is None
        and c.parent_action_id is None
    )


def _node_exclude(
    node: Signal | Action, source: Source, parent: str | None, parent_signal: str | None
) -> Any:
    """What of a signal or an action equals its default (the module docstring)."""
    out: dict[str, Any] = {}
    ref, chain = node.source, node.chain
    if ref.source_id == source.source_id and ref.source_type == source.source_type:
        out["source"] = True
    if node.timestamp == source.timestamp:
        out["timestamp"] = True
    if chain.chain_id == source.chain.chain_id and chain.root_source_id == source.chain.root_source_id:
        default = (
            chain.parent_node_id == parent
            and chain.parent_signal_id == parent_signal
            and chain.parent_action_id is None
        )
        out["chain"] = True if default else _ROOT_IDS
    return out


def _is_built_in(s: Signal, a: Action, r: ExecutorResult) -> bool:
    """Whether ``s`` is what :func:`~worker.core.nodes.result_signal` builds for ``a`` and ``r`` at its time,
    compared field by field (building one to compare cost more than the rest of the stored form)."""
    c, ac, p = s.chain, a.chain, s.payload
    return (
        s.signal_type == f"signal.action.{r.status}"
        and s.source.source_id == a.source.source_id
        and s.source.source_type == a.source.source_type
        and c.chain_id == ac.chain_id
        and c.root_source_id == ac.root_source_id
        and c.parent_node_id == a.action_id
        and c.parent_action_id == a.action_id
        and c.parent_signal_id is None
        and len(p) == 3 + (r.detail is not None) + (r.error is not None)
        and p.get("actionId") == a.action_id
        and p.get("actionType") == a.action_type
        and p.get("detail") == r.detail
        and p.get("attempt") == attempt_json(r.attempt)
        and (r.error is None or p.get("error") == r.error.to_json_dict())
    )


def nodes_json(
    source: Source,
    signals: Sequence[Signal],
    actions: Sequence[Action],
    results: Sequence[ExecutorResult],
    *,
    duration_ms: float | None,
    trace_id: str | None,
    metadata: dict[str, Any] | None,
) -> bytes:
    """The compact JSON of the stored form of a chain (the module docstring; the key order is
    :mod:`worker.documents.chain_codec`'s dictionary's)."""
    meta = metadata or {}
    source_out: set[str] = set()
    if _is_root_chain(source):
        source_out.add("chain")
    if source.event_id is not None and source.event_id == meta.get("eventId"):
        source_out.add("event_id")
    signals_out: dict[int, Any] = {}
    by_action = {a.action_id: a for a in actions}
    k = 0  # the next result whose built-in signal may be left out
    for i, s in enumerate(signals):
        if k < len(results) and s.signal_id == results[k].action_id + _RESULT_SUFFIX:
            action = by_action.get(results[k].action_id)
            if action is not None and _is_built_in(s, action, results[k]):
                signals_out[i] = _BUILT_IN_SIGNAL
                k += 1
                continue
        if out := _node_exclude(s, source, source.source_id, None):
            signals_out[i] = out
    actions_out: dict[int, Any] = {}
    for i, a in enumerate(actions):
        if out := _node_exclude(a, source, a.signal.signal_id, a.signal.signal_id):
            actions_out[i] = out
    results_out = {
        i: {"action_id"} for i, r in enumerate(results[: len(actions)]) if r.action_id == actions[i].action_id
    }
    stored: dict[str, Any] = {
        "nodes": {
            "actions": actions,
            "metadata": meta,
            "results": results,
            "signals": signals,
            "source": source,
        }
    }
    if duration_ms is not None:
        stored["durationMs"] = duration_ms  # rounded where it was measured (a read's projection rounds too)
    if trace_id is not None:
        stored["traceId"] = trace_id
    exclude: Any = {  # pydantic-core's nested include/exclude form
        "nodes": {
            "source": source_out,
            "signals": signals_out,
            "actions": actions_out,
            "results": results_out,
            "metadata": {"eventId"},  # the key's suffix (chain:<eventId>): a read puts it back
        }
    }
    return to_json(stored, by_alias=True, exclude_none=True, exclude=exclude)


def _full_node(node: dict[str, Any], source: Source, parents: dict[str, Any]) -> dict[str, Any]:
    """A stored signal's or action's JSON with its defaults put back."""
    full = dict(node)
    full.setdefault("source", {"sourceId": source.source_id, "sourceType": source.source_type})
    full.setdefault("timestamp", source.timestamp)
    root = {"chainId": source.chain.chain_id, "rootSourceId": source.chain.root_source_id}
    full["chain"] = {**root, **full["chain"]} if "chain" in full else {**root, **parents}
    return full


def nodes_of(nodes: dict[str, Any], event_id: str | None = None) -> NodeArgs:
    """The source, signals, actions, results and metadata of a stored ``nodes`` object (KeyError, TypeError or
    ValueError when it is not a chain's); ``event_id``: the event whose chain it is (its key's suffix), put back
    in the metadata when the stored form left it out."""
    meta = dict(nodes.get("metadata") or {})
    if event_id is not None and "eventId" not in meta:
        meta = {"eventId": event_id, **meta}
    source, actions = source_and_actions_of(nodes, meta)
    results = []
    for i, r in enumerate(nodes["results"]):
        results.append(
            ExecutorResult.model_validate(r if "actionId" in r else {"actionId": actions[i].action_id, **r})
        )
    by_action = {a.action_id: a for a in actions}
    signals, k = [], 0
    for s in nodes["signals"]:
        if "signalId" not in s:  # a built-in result signal: the next result's
            result = results[k]
            signals.append(result_signal(by_action[result.action_id], result, int(s["timestamp"])))
            k += 1
        else:
            signals.append(Signal.model_validate(_full_node(s, source, {"parentNodeId": source.source_id})))
    return source, signals, actions, results, meta


def source_and_actions_of(nodes: dict[str, Any], meta: dict[str, Any]) -> tuple[Source, list[Action]]:
    """The source and actions of a stored ``nodes`` object, its signals and results left unread (erasure asks
    this of each of a user's chains: the lanes are the actions'); ``meta``: its metadata, the event id put back."""
    source_json = dict(nodes["source"])
    if "eventId" not in source_json and "eventId" in meta:
        source_json["eventId"] = meta["eventId"]
    if "chain" not in source_json:
        source_json["chain"] = {
            "chainId": f"chain:{source_json['sourceId']}",
            "rootSourceId": source_json["sourceId"],
        }
    source = Source.model_validate(source_json)
    actions = []
    for a in nodes["actions"]:
        signal_id = a["signal"]["signalId"]
        parents = {"parentNodeId": signal_id, "parentSignalId": signal_id}
        actions.append(Action.model_validate(_full_node(a, source, parents)))
    return source, actions
