"""What a finished chain counts, in LobeHub's order (persistAgentSignalObservability's metrics): its source,
its signals, each action and its signal → action transition, each result, the chain. Counted from the chain's
nodes as its projection would state them (``finalStatus``: the status of the last action's result, ``none``
without one), so a commit never has to project the chain to count it (a unit test compares the two)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from worker.core.nodes import Action, ExecutorResult, Signal, Source
from worker.telemetry.instruments import AttrsKey
from worker.telemetry.instruments import agent_signal_attrs as _a
from worker.telemetry.instruments import signal_type_attrs as _signal_attrs

__all__ = ["ChainShape", "FinishedChain", "Series", "chain_series", "chain_shape", "general_shape"]

# (source type, signal types, (action type, its signal's type) per action, (action type, result status) per
# result of a known action, final status): two chains of one shape count the same series.
ChainShape = tuple[str, tuple[str, ...], tuple[tuple[str, str], ...], tuple[tuple[str, str], ...], str]
# (the counted series in LobeHub's order, each result's attributes, the chain's attributes)
Series = tuple[list[tuple[str, AttrsKey]], list[AttrsKey], AttrsKey]


class FinishedChain(Protocol):
    """A chain that ran to its end, as the telemetry reads it (worker/chain/chain_document.py's ChainRun)."""

    @property
    def source(self) -> Source: ...
    @property
    def signals(self) -> Sequence[Signal]: ...
    @property
    def actions(self) -> Sequence[Action]: ...
    @property
    def results(self) -> Sequence[ExecutorResult]: ...
    @property
    def duration_ms(self) -> float: ...
    def projection(self) -> Mapping[str, Any]: ...
    def events(self) -> Sequence[Mapping[str, Any]]: ...


def chain_shape(chain: FinishedChain) -> tuple[ChainShape, list[ExecutorResult]]:
    """The chain's shape and its results of known actions, in order (the action-duration samples). Runs once
    per committed event: a chain of one action and its one result (most chains) is read in plain statements, a
    third of the time of :func:`general_shape` (on Python 3.11 each comprehension is a call of its own)."""
    actions, results = chain.actions, chain.results
    if len(actions) == 1 and len(results) == 1:
        action, result = actions[0], results[0]
        if result.action_id == action.action_id:
            signals = chain.signals
            if len(signals) == 2:  # the action's signal and its result's (most chains)
                types: tuple[str, ...] = (signals[0].signal_type, signals[1].signal_type)
            else:
                types = tuple([signal.signal_type for signal in signals])
            action_type, status = action.action_type, result.status
            pairs = ((action_type, action.signal.signal_type),)
            shape = (chain.source.source_type, types, pairs, ((action_type, status),), status)
            return shape, [result]
    return general_shape(chain)


def general_shape(chain: FinishedChain) -> tuple[ChainShape, list[ExecutorResult]]:
    """:func:`chain_shape` of any chain."""
    actions, results = chain.actions, chain.results
    by_id = {a.action_id: a for a in actions}
    known: list[ExecutorResult] = []
    statuses: list[tuple[str, str]] = []
    for result in results:
        action = by_id.get(result.action_id)
        if action is not None:
            known.append(result)
            statuses.append((action.action_type, result.status))
    final_status = "none"
    if actions:
        last_id = actions[-1].action_id
        for result in results:
            if result.action_id == last_id:
                final_status = result.status
                break
    shape = (
        chain.source.source_type,
        tuple([s.signal_type for s in chain.signals]),
        tuple([(a.action_type, a.signal.signal_type) for a in actions]),
        tuple(statuses),
        final_status,
    )
    return shape, known


def chain_series(shape: ChainShape) -> Series:
    """The series a chain of ``shape`` counts."""
    source_type, signal_types, actions, results, final_status = shape

    def frozen(attrs: Mapping[str, Any]) -> AttrsKey:
        return tuple(sorted(attrs.items()))

    counted = [("agent_signal_source_occurrences_total", frozen(_a(source_type=source_type)))]
    counted += [
        ("agent_signal_signal_occurrences_total", frozen(_signal_attrs(t, source_type))) for t in signal_types
    ]
    for action_type, signal_type in actions:
        counted.append(("agent_signal_action_occurrences_total", frozen(_a(action_type=action_type))))
        transition = {**_a(action_type=action_type), **_signal_attrs(signal_type, None)}
        counted.append(("agent_signal_signal_action_transitions_total", frozen(transition)))
    result_keys = [frozen(_a(action_type=a, result_status=status)) for a, status in results]
    counted += [("agent_signal_action_results_total", key) for key in result_keys]
    chain_key = frozen(_a(final_status=final_status, source_type=source_type))
    counted.append(("agent_signal_chains_total", chain_key))
    return counted, result_keys, chain_key
