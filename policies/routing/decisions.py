"""The decision half of a compiled router: every decision's rule tree as nested closures over a
:class:`~policies.routing.signals.SignalState`, evaluated in priority groups, and answers computed once per
config for requests without external signals.

Trees short-circuit (``AND`` stops at its first unmatched child); the answer cannot depend on it, because
evaluating a leaf has no effect. Without external signals and without predicate leaves, the state a tree
reads is a function of the request's *matched mask* alone (which internal rules matched: their confidence
is always 1.0, there are no errors, and only predicate leaves read values), so the answer is too. The
router therefore evaluates the trees for each mask when the config is loaded (``by_mask``) and a request
looks its answer up; mask 0 is the fast path of a request that matched no rule, kept even when there are
too many rules for the whole table. Anything else (external signals, predicate leaves) is evaluated per
request.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from policies.routing.config import Decision, RouterConfig, RuleNode
from policies.routing.signals import SignalPlan, SignalState

__all__ = [
    "MAX_TABLE_EVALUATIONS",
    "NO_MATCH",
    "DecisionPlan",
    "Match",
    "compile_rule",
    "leaves",
    "reads_values",
]

Match = tuple[bool, float, list[str]]
NO_MATCH: Match = (False, 0.0, [])
Evaluate = Callable[[SignalState], Match]
Chosen = tuple[Decision, Match]

# The whole table costs (2 ** referenced rules) x decisions tree evaluations when the config is loaded; above
# this many (about 10 ms), only the no-match entry is precomputed. The benchmark config needs 512 x 6.
MAX_TABLE_EVALUATIONS = 16_384


def leaves(node: RuleNode) -> Iterable[RuleNode]:
    if node.is_leaf:
        yield node
    for child in node.conditions:
        yield from leaves(child)


def _always(_: SignalState) -> Match:
    return True, 0.0, []


def _never(_: SignalState) -> Match:
    return NO_MATCH


def _compile_leaf(node: RuleNode) -> Evaluate:
    kind = node.type.strip().lower()
    key = f"{kind}:{node.name}"
    value_key = key + (f":{node.label}" if node.label else "")
    label = [f"{node.type}:{node.name}" + (f":{node.label}" if node.label else "")]
    hit: Match = (True, 1.0, label)
    name = node.name
    predicate = node.predicate
    on_error_match = node.on_error.lower() == "match"
    if predicate is not None:

        def leaf_with_predicate(sig: SignalState) -> Match:
            value = sig.values.get(value_key)
            if value is not None:
                return hit if predicate.holds(value) else NO_MATCH
            if on_error_match and key in sig.errors:
                return hit
            return NO_MATCH

        return leaf_with_predicate
    if kind == "classifier":
        return _never

    def leaf(sig: SignalState) -> Match:
        names = sig.matched.get(kind)
        if names is not None and name in names:
            return True, sig.confidences.get(key, 1.0), label
        return NO_MATCH

    return leaf


def _mean(values: list[float]) -> float:
    """The mean, as ``sum / count`` (what the reference computes); finite whenever the values are (two
    confidences of 1e308 sum to infinity, so then each is divided first)."""
    total = sum(values)
    if math.isinf(total) and all(math.isfinite(v) for v in values):
        return sum(v / len(values) for v in values)
    return total / len(values)


def _compile_operator(operator: str, children: tuple[Evaluate, ...]) -> Evaluate:
    if operator == "AND":
        if not children:
            return _always

        def all_of(sig: SignalState) -> Match:
            confidences: list[float] = []
            rules: list[str] = []
            for child in children:
                matched, confidence, child_rules = child(sig)
                if not matched:
                    return NO_MATCH
                confidences.append(confidence)
                rules += child_rules
            return True, _mean(confidences), rules

        return all_of
    if operator == "NOT":
        if len(children) != 1:
            return _never
        only = children[0]
        return lambda sig: NO_MATCH if only(sig)[0] else (True, 1.0, [])

    def best_of(sig: SignalState) -> Match:  # OR, and any unknown operator
        best: Match | None = None
        for child in children:
            result = child(sig)
            if result[0] and (best is None or result[1] > best[1]):
                best = result
        return best or NO_MATCH

    return best_of


def compile_rule(node: RuleNode) -> Evaluate:
    """A rule tree as nested closures (compiled once per config, evaluated per request). Only an empty
    *root* means "always"; an empty node inside a tree is an operator without children (OR: never)."""
    if node.is_leaf:
        return _compile_leaf(node)
    return _compile_operator(node.operator.strip().upper(), tuple(compile_rule(c) for c in node.conditions))


def reads_values(config: RouterConfig) -> bool:
    """Whether some decision leaf has a predicate (only those read signal values)."""
    return any(leaf.predicate is not None for d in config.decisions for leaf in leaves(d.rules))


class DecisionPlan:
    """Every decision of a config, compiled; ``decide`` picks the winner (or None) for a signal state.

    ``by_mask`` holds answers computed once, by matched mask, for requests without external signals: for
    every mask when that costs at most :data:`MAX_TABLE_EVALUATIONS` tree evaluations, else for the empty
    mask only (the fast path of a request that matched no rule). It is empty when some leaf reads values."""

    def __init__(self, config: RouterConfig, signals: SignalPlan) -> None:
        self.strategy = config.strategy
        compiled = [(d, _always if d.rules.empty else compile_rule(d.rules)) for d in config.decisions]
        # Under the priority strategy with no tiers configured, a decision can only win against others of
        # its own priority, so decisions are evaluated in priority groups, highest first, stopping at the
        # first group with a match. Otherwise every decision is evaluated (one group).
        self.stop_at_first_group = config.strategy == "priority" and not any(
            d.tier > 0 for d in config.decisions
        )
        if self.stop_at_first_group:
            priorities = sorted({d.priority for d in config.decisions}, reverse=True)
            self.groups = tuple(tuple(c for c in compiled if c[0].priority == p) for p in priorities)
        else:
            self.groups = (tuple(compiled),)
        self.by_mask: dict[int, Chosen | None] = {}
        if not reads_values(config):
            whole = (len(config.decisions) << signals.rule_count) <= MAX_TABLE_EVALUATIONS
            masks = range(1 << signals.rule_count) if whole else range(1)
            self.by_mask = {mask: self.decide(signals.state(mask, {})) for mask in masks}

    def decide(self, sig: SignalState) -> Chosen | None:
        matched: list[Chosen] = []
        for group in self.groups:
            for decision, evaluate in group:
                result = evaluate(sig)
                if result[0]:
                    matched.append((decision, result))
            if matched and self.stop_at_first_group:
                break  # lower-priority groups cannot win under the priority strategy without tiers
        if not matched:
            return None
        if len(matched) == 1:
            return matched[0]
        if any(d.tier > 0 for d, _ in matched):
            matched.sort(key=lambda m: (m[0].tier, -m[1][1], -m[0].priority, m[0].name))
        elif self.strategy == "confidence":
            matched.sort(key=lambda m: (-m[1][1], -m[0].priority, m[0].name))
        else:
            matched.sort(key=lambda m: (-m[0].priority, -m[1][1], m[0].name))
        return matched[0]
