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

__all__ = [
    "ChainShape",
    "FinishedChain",
    "OneActionKey",
    "Series",
    "chain_series",
    "chain_shape",
    "one_action_key",
]

# (source type, signal types, (action type, its signal's type) per action, (action type, result status) per
# result of a known action, final status): two chains of one shape count the same series.
ChainShape = tuple[str, tuple[str, ...], tuple[tuple[str, str], ...], tuple[tuple[str, str], ...], str]
# (source type, the two signal types, action type, its signal's type, result status): a one-action chain's shape
OneActionKey = tuple[str, str, str, str, str, str]
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


def one_action_key(chain: FinishedChain) -> OneActionKey | None:
    """The strings that make the shape of a chain of one action, its result and two signals (the action's and
    its result's: most chains), as one flat tuple: (source type, the two signal types, the action's type, its
    signal's type, the result's status); None for any other chain. It names the shape as :func:`chain_shape`
    does, without building, hashing and comparing the nested tuples per committed event."""
    actions, results, signals = chain.actions, chain.results, chain.signals
    if len(actions) != 1 or len(results) != 1 or len(signals) != 2:
        return None
    action, result = actions[0], results[0]
    if result.action_id != action.action_id:
        return None
    return (
        chain.source.source_type,
        signals[0].signal_type,
        signals[1].signal_type,
        action.action_type,
        action.signal.signal_type,
        result.status,
    )


def chain_shape(chain: FinishedChain) -> tuple[ChainShape, list[ExecutorResult]]:
    """The chain's shape and its results of known actions, in order (the action-duration samples)."""
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
