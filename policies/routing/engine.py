"""Signals → decision → model (vLLM Semantic Router's conversation family and decision engine).

``Router(config).route(request, protocol, external_signals)`` is a pure function of its arguments: it
extracts the facts, evaluates the conversation and keyword rules that some decision references (values are
published even when a rule does not match), folds in externally supplied signals, and picks the decision a
full evaluation of every decision's rule tree would pick:

* leaf: with a ``predicate``, the signal's *value* must satisfy it (confidence 1.0; NaN/±Inf never match),
  or, when the value is missing and the signal reported an error, ``on_error: match`` matches; without a
  predicate, the name must be among the matched names of its type (confidence from the signal, 1.0 when
  absent). ``classifier`` leaves only work with a predicate. Unknown types never match.
* ``AND``: all children, confidence = mean, rules concatenated; empty AND = catch-all with confidence 0.
  ``NOT``: exactly one child, matches (confidence 1.0, no rules) when the child does not. Any other operator
  is ``OR``: the best child (first wins ties); empty OR never matches. An omitted/empty root always matches
  with confidence 0.
* selection (stable): if any matched decision has ``tier > 0``: tier ascending, confidence desc, priority
  desc, name asc (strategy ignored; untiered 0 sorts first). Else ``confidence``: confidence, priority, name;
  else ``priority``: priority, confidence, name.
* compiled once per config (:mod:`policies.routing.signals`, :mod:`policies.routing.decisions`): one walk
  over the messages gives the facts and the latest user message, the referenced rules give the published
  signals and a matched mask, and a request without external signals looks its decision up by that mask
  (answers precomputed when the config is loaded: for every mask while that is cheap, else for the mask of
  a request that matched no rule; none when some leaf has a predicate). Otherwise the trees are evaluated.
* an external signal whose ``type:name`` is one of the config's own conversation or keyword rules is refused
  (:class:`~policies.routing.envelope.InvalidRouteInput` naming ``externalSignals[i].name``): it would publish
  over the rule's entry while the decision still read the rule's own match. External signals are published
  under the key leaves match them by (type trimmed and lower-cased).
* model: a request whose ``model`` is absent or ``"auto"`` gets the decision's first modelRef, or
  ``providers.defaults.default_model`` when the decision has none or nothing matched; any other model is kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from policies.routing.config import ConversationRule, RouterConfig
from policies.routing.decisions import DecisionPlan, leaves, reads_values
from policies.routing.envelope import InvalidRouteInput
from policies.routing.facts import Facts, scan_request
from policies.routing.signals import SignalPlan, merge_external, raw_of

__all__ = ["NoDecisionsConfigured", "Router", "latest_user_text"]

_CHAT_TEXT_TYPES = ("text", "input_text")


class NoDecisionsConfigured(ValueError):
    """The config has no decisions (vLLM Semantic Router: "no decisions configured")."""

    def __init__(self) -> None:
        super().__init__("no decisions configured")


def _text_of(content: Any, text_types: tuple[str, ...]) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            p["text"]
            for p in content
            if isinstance(p, Mapping) and p.get("type") in text_types and isinstance(p.get("text"), str)
        )
    return ""


def latest_user_text(request: Mapping[str, Any], protocol: str) -> str:
    """The text of the latest user message (what keyword rules match against)."""
    if protocol == "openai-responses":
        items = request.get("input")
        if isinstance(items, str):
            return items
        for item in reversed(items if isinstance(items, list) else []):
            if isinstance(item, Mapping) and item.get("role") == "user":
                return _text_of(item.get("content"), ("input_text", "text"))
        return ""
    messages = request.get("messages")
    for message in reversed(messages if isinstance(messages, list) else []):
        if isinstance(message, Mapping) and message.get("role") == "user":
            return _text_of(message.get("content"), _CHAT_TEXT_TYPES)
    return ""


class Router:
    """A compiled configuration; ``route`` may be called concurrently (no mutable state). ``fingerprint`` names
    the config text it was loaded from (:func:`~policies.routing.loader.load_router_text`), or is None."""

    def __init__(self, config: RouterConfig, *, fingerprint: str | None = None) -> None:
        self.config = config
        self.fingerprint = fingerprint
        # An external signal may not stand in for a rule the config computes itself (compared as decision
        # leaves reference rules: the whole key lower-cased).
        self._internal_keys = frozenset(
            [f"conversation:{r.name}".lower() for r in config.conversation]
            + [f"keyword:{r.name}".lower() for r in config.keyword]
        )
        used = {
            f"{leaf.type.strip().lower()}:{leaf.name}".lower()
            for d in config.decisions
            for leaf in leaves(d.rules)
        }
        self._signals = SignalPlan(
            [r for r in config.conversation if f"conversation:{r.name}".lower() in used],
            [r for r in config.keyword if f"keyword:{r.name}".lower() in used],
            record_values=reads_values(config),
        )
        self._decisions = DecisionPlan(config, self._signals)

    @staticmethod
    def conversation_raw(rule: ConversationRule, f: Facts) -> int:
        """The rule's raw number before ``exists`` turns it into 0/1."""
        return int(raw_of(rule)(f))

    def _text(
        self, request: Mapping[str, Any], protocol: str, latest: dict[str, Any] | None, seen: bool
    ) -> str:
        """The keyword rules' text: the latest user message the walk saw, else looked up."""
        if not seen:
            return latest_user_text(request, protocol)
        return "" if latest is None else _text_of(latest.get("content"), _CHAT_TEXT_TYPES)

    def _refuse_internal_names(self, external: Sequence[Mapping[str, Any]]) -> None:
        for i, item in enumerate(external):
            kind, name = str(item["type"]).strip().lower(), str(item["name"])
            if f"{kind}:{name}".lower() in self._internal_keys:
                field = f"externalSignals[{i}].name"
                message = (
                    f"{field}: {kind}:{name} is a {kind} rule of the router config; an external signal cannot "
                    "stand in for it"
                )
                raise InvalidRouteInput(field, message)

    def route(
        self,
        request: Mapping[str, Any],
        protocol: str = "openai-chat",
        external_signals: Sequence[Mapping[str, Any]] = (),
    ) -> dict[str, Any]:
        """The RouteResult for one request; :class:`InvalidRouteInput` when an external signal names one of the
        config's own rules."""
        if not self.config.decisions:
            raise NoDecisionsConfigured()
        if external_signals:
            self._refuse_internal_names(external_signals)
        facts, latest, seen = scan_request(request, protocol)
        text = self._text(request, protocol, latest, seen) if self._signals.keyword else ""
        published, mask, values = self._signals.evaluate(facts, text)
        by_mask = self._decisions.by_mask
        if not external_signals and mask in by_mask:
            chosen = by_mask[mask]
        else:
            sig = self._signals.state(mask, values)
            merge_external(sig, published, external_signals)
            chosen = self._decisions.decide(sig)
        requested = request.get("model")
        auto = requested is None or requested == "auto"
        decision_json = None
        model = self.config.default_model if auto else requested
        if chosen is not None:
            decision, (_, confidence, rules) = chosen
            decision_json = {
                "name": decision.name,
                "confidence": confidence,
                "matchedRules": list(rules),
                "modelRefs": [dict(r) for r in decision.model_refs],
            }
            if auto:
                model = decision.model_refs[0]["model"] if decision.model_refs else self.config.default_model
        return {
            "facts": facts.to_json_dict(),
            "signals": published,
            "decision": decision_json,
            "model": model,
        }
