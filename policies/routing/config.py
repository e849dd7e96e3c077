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

Stricter than the reference where silence hid a mistake: a key under ``routing`` or ``routing.signals`` that
nothing reads (``keywords:``, ``decision:``) is an error naming its path, and so is a decision leaf of type
``conversation`` or ``keyword`` naming a rule the config does not declare (it could never match). Numbers
beyond the float range count as not finite, a rule tree nests at most :data:`MAX_RULE_DEPTH` rules, and
``modelRefs`` (answered as they are) must be JSON: finite numbers, no dates.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from difflib import get_close_matches
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
ROUTING_KEYS = ("strategy", "signals", "decisions")
SIGNAL_KEYS = ("conversation", "keyword")
# A decision's rule tree may nest this many rules deep (a real one nests three or four); checked without
# recursion before the tree is read (a rule is two levels of YAML: its mapping and its conditions list), so a
# deeper one is one error, not a RecursionError.
MAX_RULE_DEPTH = 32
MAX_YAML_DEPTH = 2 * MAX_RULE_DEPTH


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
    """A YAML number as a float (an integer beyond the float range is infinite), or None for anything else."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


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


Declared = Mapping[str, frozenset[str]]  # rule type (conversation, keyword) -> the names the config declares


def _depth(raw: Any) -> int:
    """How deep mappings and lists nest in ``raw`` (a scalar is 0), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(raw, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, Mapping):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
        else:
            continue
        deepest = max(deepest, depth + 1)
    return deepest


def _undeclared(node_type: str, name: str, declared: Declared) -> str | None:
    """The error for a leaf naming a conversation or keyword rule the config does not declare (the leaf could
    never match: those types are computed from the config alone, and external signals may not stand in)."""
    kind = node_type.strip().lower()
    if kind not in declared or name in declared[kind]:
        return None
    problem = f'{kind} rule "{name}" is not declared in routing.signals.{kind}'
    other = sorted(n for n in declared[kind] if n.lower() == name.lower())
    return f'{problem} (names match exactly; it declares "{other[0]}")' if other else problem


def _rule_node(raw: Any, where: str, errors: list[str], declared: Declared) -> RuleNode:
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
    name = str(raw.get("name") or "")
    if node_type and (problem := _undeclared(str(node_type), name, declared)) is not None:
        errors.append(f"{where}: {problem}")
    operator = str(raw.get("operator") or "")
    if not str(node_type) and not name and not operator and not conditions:
        # vLLM's RuleNode.IsEmpty: no type, name, operator or conditions (a label, a predicate or on_error alone
        # do not count), so ``{conditions: []}`` is an omitted root too
        return RuleNode(empty=True)
    return RuleNode(
        type=str(node_type).strip(),
        name=name,
        label=str(raw.get("label") or ""),
        predicate=parsed_predicate,
        on_error=str(raw.get("on_error") or ""),
        operator=operator,
        conditions=tuple(
            _rule_node(c, f"{where}.conditions[{j}]", errors, declared) for j, c in enumerate(conditions)
        ),
    )


def _int(value: Any, where: str, errors: list[str]) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        errors.append(f"{where} must be an integer")
        return 0
    return value


def _json_problem(value: Any) -> str | None:
    """Why ``value`` cannot go into a JSON answer as it is (a non-finite number, a date, a non-text key), or
    None; without recursion."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            if not all(isinstance(k, str) for k in item):
                return "keys must be strings"
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, float) and not math.isfinite(item):
            return "numbers must be finite"
        elif item is not None and not isinstance(item, str | int | float):
            return f"values must be JSON (found a {type(item).__name__})"
    return None


def _model_refs(raw: Mapping[str, Any], where: str, errors: list[str]) -> list[Mapping[str, Any]]:
    """The decision's modelRefs (answered as they are, so they must be JSON), or [] after an error."""
    refs = raw.get("modelRefs") or []
    if not isinstance(refs, list) or not all(
        isinstance(r, Mapping) and isinstance(r.get("model"), str) for r in refs
    ):
        errors.append(f"{where}: modelRefs must be a list of {{model: NAME, ...}}")
        return []
    problem = _json_problem(refs) if _depth(refs) <= MAX_YAML_DEPTH else "nest too deep"
    if problem is not None:
        errors.append(f"{where}: modelRefs {problem}")
        return []
    return refs


def _rules(raw: Any, where: str, errors: list[str], declared: Declared) -> RuleNode:
    if _depth(raw) > MAX_YAML_DEPTH:
        errors.append(f"{where}: nested deeper than {MAX_RULE_DEPTH} rules")
        return RuleNode(empty=True)
    return _rule_node(raw, where, errors, declared)


def _decisions(items: Any, errors: list[str], declared: Declared) -> list[Decision]:
    decisions: list[Decision] = []
    for i, name, raw in _named_entries(items, "routing.decisions", "decision", errors):
        refs = _model_refs(raw, f'decision [{i}] "{name}"', errors)
        decisions.append(
            Decision(
                name=name,
                priority=_int(raw.get("priority"), f'decision [{i}] "{name}": priority', errors),
                tier=_int(raw.get("tier"), f'decision [{i}] "{name}": tier', errors),
                rules=_rules(raw.get("rules"), f'decision [{i}] "{name}": rules', errors, declared),
                model_refs=tuple(dict(r) for r in refs),
                description=str(raw.get("description") or ""),
            )
        )
    return decisions


def _keyword_family(signals: Mapping[Any, Any], errors: list[str]) -> Mapping[Any, Any]:
    """``signals`` with vLLM's other spelling of the keyword family (``keywords:``, its tutorials' and older
    configs') read as ``keyword:``; both at once is an error (which one counts would be a guess)."""
    if "keywords" not in signals:
        return signals
    if "keyword" in signals:
        errors.append(
            "routing.signals has both keyword and keywords: give the keyword rules under one of them"
        )
    renamed = {k: v for k, v in signals.items() if k != "keywords"}
    renamed.setdefault("keyword", signals["keywords"])
    return renamed


def _unknown_keys(section: Mapping[Any, Any], path: str, known: tuple[str, ...], errors: list[str]) -> None:
    """One error per key of ``section`` that nothing reads and that is a near miss of one that is (a misspelt
    ``keywords:`` or ``decision:`` was ignored unseen, and its rules or decisions silently missing). Other keys
    are vLLM's own that this router does not read (``routing.projections``, ``signals.domain``, …): a config
    written for vLLM loads, those parts ignored, as docs/routing.md says."""
    for key in section:
        if key not in known and get_close_matches(str(key), known, n=1, cutoff=0.75):
            errors.append(f"unknown key {path}.{key}; valid keys: {', '.join(known)}")


def _declared_names(items: Any) -> frozenset[str]:
    """Every name a rule list gives (valid rule or not: an invalid one has its own error already)."""
    if not isinstance(items, list):
        return frozenset()
    return frozenset(r["name"] for r in items if isinstance(r, Mapping) and isinstance(r.get("name"), str))


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
    _unknown_keys(routing, "routing", ROUTING_KEYS, errors)
    signals = routing.get("signals") or {}
    if not isinstance(signals, Mapping):
        errors.append("routing.signals must be a mapping")
        signals = {}
    signals = _keyword_family(signals, errors)
    _unknown_keys(signals, "routing.signals", SIGNAL_KEYS, errors)
    conversation = _conversation_rules(signals.get("conversation"), errors)
    keyword = _keyword_rules(signals.get("keyword"), errors)
    declared = {kind: _declared_names(signals.get(kind)) for kind in SIGNAL_KEYS}
    decisions = _decisions(routing.get("decisions"), errors, declared)
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
