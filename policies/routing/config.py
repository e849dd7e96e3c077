"""Router configuration in vLLM Semantic Router's YAML, validated with its exact messages.

Shape (the parts we read)::

    routing:
      strategy: priority | confidence          # default priority
      signals:
        conversation: [{name, description?, feature: {type, source: {type, role?}}, predicate?: {gt,gte,lt,lte}}]
        keyword:      [{name, operator: AND|OR|NOR, keywords: [..], case_sensitive?: bool}]
      decisions: [{name, description?, priority, tier?, rules?: RuleNode, modelRefs: [{model, ...}]}]
    providers:
      defaults: {default_model: NAME}

Validation keeps the documented behaviour where code and docs disagree: a ``count`` rule without predicate is
valid (and matches unconditionally), predicates have no ``eq``/``range``, decision ``operator`` values are not
validated (unknown ones act as OR at runtime). Errors are collected, one string each, so ``--check`` can print
every problem at once.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ConfigError",
    "ConversationRule",
    "Decision",
    "KeywordRule",
    "Predicate",
    "RouterConfig",
    "RuleNode",
    "parse_router_config",
]

FEATURE_TYPES = ("count", "exists")
SOURCE_TYPES = (
    "message",
    "tool_definition",
    "tool_choice_required",
    "tool_choice_none",
    "assistant_tool_call",
    "assistant_tool_cycle",
    "active_tool_loop",
    "flow_tool_state",
    "image_content",
)
ROLES = ("user", "assistant", "system", "developer", "tool", "non_user")
KEYWORD_OPERATORS = ("AND", "OR", "NOR")
STRATEGIES = ("priority", "confidence")


class ConfigError(ValueError):
    """The configuration is invalid; ``errors`` lists every problem, one line each."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("\n".join(errors))
        self.errors = errors


@dataclass(frozen=True, slots=True)
class Predicate:
    gt: float | None = None
    gte: float | None = None
    lt: float | None = None
    lte: float | None = None

    def holds(self, value: float) -> bool:
        """All set bounds hold; NaN and infinities never match."""
        if value != value or value in (math.inf, -math.inf):
            return False
        if self.gt is not None and not value > self.gt:
            return False
        if self.gte is not None and not value >= self.gte:
            return False
        if self.lt is not None and not value < self.lt:
            return False
        return not (self.lte is not None and not value <= self.lte)


@dataclass(frozen=True, slots=True)
class ConversationRule:
    name: str
    feature_type: str
    source_type: str
    role: str = ""
    predicate: Predicate | None = None
    description: str = ""


@dataclass(frozen=True, slots=True)
class KeywordRule:
    name: str
    operator: str
    keywords: tuple[str, ...]
    case_sensitive: bool = False


@dataclass(frozen=True, slots=True)
class RuleNode:
    type: str = ""
    name: str = ""
    label: str = ""
    predicate: Predicate | None = None
    on_error: str = ""
    operator: str = ""
    conditions: tuple[RuleNode, ...] = ()
    empty: bool = False  # the node had no content at all (an omitted/empty root means "always")

    @property
    def is_leaf(self) -> bool:
        return self.type != ""


@dataclass(frozen=True, slots=True)
class Decision:
    name: str
    priority: int = 0
    tier: int = 0
    rules: RuleNode = field(default_factory=lambda: RuleNode(empty=True))
    model_refs: tuple[dict[str, Any], ...] = ()
    description: str = ""


@dataclass(frozen=True, slots=True)
class RouterConfig:
    strategy: str = "priority"
    conversation: tuple[ConversationRule, ...] = ()
    keyword: tuple[KeywordRule, ...] = ()
    decisions: tuple[Decision, ...] = ()
    default_model: str | None = None


# ---- predicate ---------------------------------------------------------------------------------------


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _predicate_error(raw: Mapping[str, Any]) -> str | None:
    """The first problem with a NumericPredicate, in the reference's order and words."""
    unknown = [k for k in raw if k not in ("gt", "gte", "lt", "lte")]
    if unknown:
        return f"predicate has unsupported comparator {unknown[0]!r}; valid comparators: gt, gte, lt, lte"
    values = {}
    for key in ("gt", "gte", "lt", "lte"):
        if key in raw and raw[key] is not None:
            number = _number(raw[key])
            if number is None or not math.isfinite(number):
                return "predicate values must be finite"
            values[key] = number
    if not values:
        return "predicate must set at least one comparator"
    if "gt" in values and "gte" in values:
        return "predicate cannot set both gt and gte"
    if "lt" in values and "lte" in values:
        return "predicate cannot set both lt and lte"
    lower = values.get("gt", values.get("gte"))
    upper = values.get("lt", values.get("lte"))
    if lower is not None and upper is not None:
        strict = "gt" in values or "lt" in values
        if lower > upper or (lower == upper and strict):
            return "predicate defines an empty numeric range"
    return None


def _predicate(raw: Mapping[str, Any]) -> Predicate:
    def get(key: str) -> float | None:
        return _number(raw.get(key)) if raw.get(key) is not None else None

    return Predicate(gt=get("gt"), gte=get("gte"), lt=get("lt"), lte=get("lte"))


# ---- conversation rules ------------------------------------------------------------------------------


def _conversation_rule_error(raw: Mapping[str, Any]) -> str | None:
    predicate = raw.get("predicate")
    if predicate is not None:
        if not isinstance(predicate, Mapping):
            return "predicate must be a mapping"
        problem = _predicate_error(predicate)
        if problem:
            return problem
    feature = raw.get("feature") if isinstance(raw.get("feature"), Mapping) else {}
    assert isinstance(feature, Mapping)
    ftype = feature.get("type") or ""
    if ftype not in FEATURE_TYPES:
        return f'unsupported feature.type "{ftype}"; valid types: {", ".join(FEATURE_TYPES)}'
    source = feature.get("source") if isinstance(feature.get("source"), Mapping) else {}
    assert isinstance(source, Mapping)
    stype = source.get("type") or ""
    if stype not in SOURCE_TYPES:
        return f'unsupported feature.source.type "{stype}"; valid types: {", ".join(SOURCE_TYPES)}'
    role = source.get("role") or ""
    if role:
        if stype != "message":
            return f'source.role is only valid when source.type is "message", got source.type "{stype}"'
        if role not in ROLES:
            return f'unsupported source.role "{role}"; valid roles: {", ".join(ROLES)}'
    if ftype == "exists" and predicate is not None:
        return 'feature.type "exists" does not accept a predicate'
    return None


def _named_entries(
    items: Any, section: str, item: str, errors: list[str]
) -> Iterator[tuple[int, str, Mapping[str, Any]]]:
    """The entries of a list section that are mappings with a unique, non-empty ``name``; every other
    entry becomes an error naming its index (``<item> [i]: …``)."""
    if items is None:
        return
    if not isinstance(items, list):
        errors.append(f"{section} must be a list")
        return
    seen: set[str] = set()
    for i, raw in enumerate(items):
        if not isinstance(raw, Mapping):
            errors.append(f"{item} [{i}]: must be a mapping")
            continue
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            errors.append(f"{item} [{i}]: name is required")
            continue
        if name in seen:
            errors.append(f'{item} [{i}]: duplicate name "{name}"')
            continue
        seen.add(name)
        yield i, name, raw


def _conversation_rules(items: Any, errors: list[str]) -> list[ConversationRule]:
    rules: list[ConversationRule] = []
    for i, name, raw in _named_entries(items, "routing.signals.conversation", "conversation rule", errors):
        problem = _conversation_rule_error(raw)
        if problem:
            errors.append(f'conversation rule [{i}] "{name}": {problem}')
            continue
        feature, source = raw["feature"], raw["feature"]["source"]
        predicate = raw.get("predicate")
        rules.append(
            ConversationRule(
                name=name,
                feature_type=feature["type"],
                source_type=source["type"],
                role=source.get("role") or "",
                predicate=_predicate(predicate) if isinstance(predicate, Mapping) else None,
                description=str(raw.get("description") or ""),
            )
        )
    return rules


# ---- keyword rules -----------------------------------------------------------------------------------


def _keyword_rules(items: Any, errors: list[str]) -> list[KeywordRule]:
    rules: list[KeywordRule] = []
    for i, name, raw in _named_entries(items, "routing.signals.keyword", "keyword rule", errors):
        operator = raw.get("operator")
        if operator not in KEYWORD_OPERATORS:
            errors.append(f'unsupported keyword rule operator: "{operator or ""}" for rule "{name}"')
            continue
        keywords = raw.get("keywords")
        if (
            not isinstance(keywords, list)
            or not keywords
            or not all(isinstance(k, str) and k for k in keywords)
        ):
            errors.append(f'keyword rule [{i}] "{name}": keywords must be a non-empty list of strings')
            continue
        case_sensitive = raw.get("case_sensitive", False)
        if not isinstance(case_sensitive, bool):
            errors.append(f'keyword rule [{i}] "{name}": case_sensitive must be true or false')
            continue
        rules.append(KeywordRule(name, operator, tuple(keywords), case_sensitive))
    return rules


# ---- decisions ---------------------------------------------------------------------------------------


def _rule_node(raw: Any, where: str, errors: list[str]) -> RuleNode:
    if raw is None:
        return RuleNode(empty=True)
    if not isinstance(raw, Mapping):
        errors.append(f"{where}: must be a mapping")
        return RuleNode(empty=True)
    if not raw:
        return RuleNode(empty=True)
    node_type = raw.get("type") or ""
    predicate = raw.get("predicate")
    parsed_predicate = None
    if predicate is not None:
        problem = (
            _predicate_error(predicate) if isinstance(predicate, Mapping) else "predicate must be a mapping"
        )
        if problem:
            errors.append(f"{where}: {problem}")
        else:
            parsed_predicate = _predicate(predicate)
    conditions = raw.get("conditions") or []
    if not isinstance(conditions, list):
        errors.append(f"{where}.conditions must be a list")
        conditions = []
    return RuleNode(
        type=str(node_type).strip(),
        name=str(raw.get("name") or ""),
        label=str(raw.get("label") or ""),
        predicate=parsed_predicate,
        on_error=str(raw.get("on_error") or ""),
        operator=str(raw.get("operator") or ""),
        conditions=tuple(_rule_node(c, f"{where}.conditions[{j}]", errors) for j, c in enumerate(conditions)),
    )


def _int(value: Any, where: str, errors: list[str]) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        errors.append(f"{where} must be an integer")
        return 0
    return value


def _decisions(items: Any, errors: list[str]) -> list[Decision]:
    decisions: list[Decision] = []
    for i, name, raw in _named_entries(items, "routing.decisions", "decision", errors):
        refs = raw.get("modelRefs") or []
        if not isinstance(refs, list) or not all(
            isinstance(r, Mapping) and isinstance(r.get("model"), str) for r in refs
        ):
            errors.append(f'decision [{i}] "{name}": modelRefs must be a list of {{model: NAME, ...}}')
            refs = []
        decisions.append(
            Decision(
                name=name,
                priority=_int(raw.get("priority"), f'decision [{i}] "{name}": priority', errors),
                tier=_int(raw.get("tier"), f'decision [{i}] "{name}": tier', errors),
                rules=_rule_node(raw.get("rules"), f'decision [{i}] "{name}": rules', errors),
                model_refs=tuple(dict(r) for r in refs),
                description=str(raw.get("description") or ""),
            )
        )
    return decisions


def parse_router_config(data: Any) -> RouterConfig:
    """Validate a decoded YAML document; raise ConfigError listing every problem."""
    errors: list[str] = []
    if not isinstance(data, Mapping):
        raise ConfigError(["config must be a mapping with a routing: section"])
    routing = data.get("routing")
    if not isinstance(routing, Mapping):
        raise ConfigError(["routing is required"])
    strategy = routing.get("strategy") or "priority"
    if strategy not in STRATEGIES:
        errors.append(f'unsupported routing.strategy "{strategy}"; valid strategies: {", ".join(STRATEGIES)}')
    signals = routing.get("signals") or {}
    if not isinstance(signals, Mapping):
        errors.append("routing.signals must be a mapping")
        signals = {}
    conversation = _conversation_rules(signals.get("conversation"), errors)
    keyword = _keyword_rules(signals.get("keyword"), errors)
    decisions = _decisions(routing.get("decisions"), errors)
    providers = data.get("providers") or {}
    defaults = providers.get("defaults") if isinstance(providers, Mapping) else None
    default_model = defaults.get("default_model") if isinstance(defaults, Mapping) else None
    if default_model is not None and not isinstance(default_model, str):
        errors.append("providers.defaults.default_model must be a string")
        default_model = None
    if errors:
        raise ConfigError(errors)
    return RouterConfig(
        strategy=str(strategy),
        conversation=tuple(conversation),
        keyword=tuple(keyword),
        decisions=tuple(decisions),
        default_model=default_model,
    )
