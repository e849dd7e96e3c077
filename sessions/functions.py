"""Function definitions: Markdown files with YAML front matter in rolebox's format (reference §1.9), read as
YAML 1.2, validated with errors that name the file and the field. YAML anchors and aliases are refused
(policies/yaml12.py: an alias bomb fails at its first anchor), and so is a ``plan_incomplete(name)`` whose name
leaves the plans directory (``../x``, an absolute path).

    ---
    name: synthesize
    description: Merge worker reports and finish with a signal
    requires_evidence: [dispatch_output]
    continue_max: 3
    continue_until: { any: [ signal_observed(answer), artifact_exists(result) ] }
    gate: { not: signal_observed(blocked) }
    observe:
      - { on: tool_after, tool: signal, when_args: { match: { type: revise_needed } }, capture_payload_as: revise_items }
    transitions:
      - { when: signal_observed(escalate), activate: [emergency-handler] }
    ---
    (the body is the function's instructions; kept, not interpreted)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from policies.yaml12 import YAML12Error, load_yaml12
from sessions.conditions import ConditionRegistry, parse_call, plan_name_problem

__all__ = [
    "FunctionDef",
    "FunctionLoadError",
    "ObserveSpec",
    "Transition",
    "load_function_dir",
    "parse_function_file",
]

OBSERVE_EVENTS = ("tool_after", "message", "activate")
KNOWN_FIELDS = frozenset(
    {
        "name",
        "description",
        "gate",
        "continue_until",
        "continue_max",
        "requires_evidence",
        "observe",
        "transitions",
        "priority",
        "requires",
        "consumes",
        "state_schema_version",
        "handlers",
    }
)


class FunctionLoadError(ValueError):
    """Definitions failed validation; ``errors`` lists ``<file>: <field>: <problem>`` lines."""

    def __init__(self, errors: list[str], warnings: list[str] | None = None) -> None:
        super().__init__("\n".join(errors))
        self.errors = errors
        self.warnings = warnings or []


@dataclass(frozen=True, slots=True)
class ObserveSpec:
    on: str
    tool: str | None = None
    when: Any = None
    inject: str | None = None
    set_evidence: str | None = None
    capture_artifact: str | None = None
    capture_payload_as: str | None = None
    when_args: Mapping[str, Any] | None = None
    when_output: Mapping[str, Any] | None = None
    sync_todos: bool = False


@dataclass(frozen=True, slots=True)
class Transition:
    when: Any
    activate: tuple[str, ...] = ()
    deactivate: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class FunctionDef:
    name: str
    description: str = ""
    gate: Any = None
    continue_until: Any = None
    continue_max: int = 5
    requires_evidence: tuple[str, ...] = ()
    observe: tuple[ObserveSpec, ...] = ()
    transitions: tuple[Transition, ...] = ()
    priority: int = 50
    state_schema_version: int = 1
    path: str = ""
    body: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)


def _check_condition(
    value: Any, where: str, errors: list[str], warnings: list[str], known: frozenset[str]
) -> None:
    if isinstance(value, str):
        name, arg = parse_call(value)
        if name not in known:
            warnings.append(f"{where}: unknown condition {value!r} (always false)")
        problem = plan_name_problem(arg) if name == "plan_incomplete" else None
        if problem is not None:
            errors.append(f"{where}: {problem}")
        return
    if isinstance(value, Mapping) and len(value) == 1:
        ((key, inner),) = value.items()
        if key in ("all", "any"):
            if not isinstance(inner, list):
                errors.append(f"{where}.{key}: must be a list of conditions")
                return
            for i, item in enumerate(inner):
                _check_condition(item, f"{where}.{key}[{i}]", errors, warnings, known)
            return
        if key == "not":
            _check_condition(inner, f"{where}.not", errors, warnings, known)
            return
    errors.append(f"{where}: must be a condition (a string, or a mapping with one of all / any / not)")


def _str_list(value: Any, where: str, errors: list[str]) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        errors.append(f"{where}: must be a list of names")
        return ()
    return tuple(value)


def _observe(
    raw: Any, where: str, errors: list[str], warnings: list[str], known: frozenset[str]
) -> ObserveSpec | None:
    if not isinstance(raw, Mapping):
        errors.append(f"{where}: must be a mapping")
        return None
    on = raw.get("on")
    if on not in OBSERVE_EVENTS:
        errors.append(f"{where}.on: must be one of {', '.join(OBSERVE_EVENTS)} (got {on!r})")
        return None
    for key in ("tool", "inject", "set_evidence", "capture_artifact", "capture_payload_as"):
        if raw.get(key) is not None and not isinstance(raw.get(key), str):
            errors.append(f"{where}.{key}: must be a string")
            return None
    for key, allowed in (
        ("when_args", ("match", "not_match")),
        ("when_output", ("contains", "not_contains")),
    ):
        block = raw.get(key)
        if block is None:
            continue
        if not isinstance(block, Mapping) or any(k not in allowed for k in block):
            errors.append(f"{where}.{key}: must be a mapping with {' and/or '.join(allowed)}")
            return None
    if raw.get("when") is not None:
        _check_condition(raw["when"], f"{where}.when", errors, warnings, known)
    if on == "tool_after" and raw.get("tool") is None:
        warnings.append(
            f"{where}: on tool_after without tool never fires (rolebox matches spec.tool === tool)"
        )
    return ObserveSpec(
        on=str(on),
        tool=raw.get("tool"),
        when=raw.get("when"),
        inject=raw.get("inject"),
        set_evidence=raw.get("set_evidence"),
        capture_artifact=raw.get("capture_artifact"),
        capture_payload_as=raw.get("capture_payload_as"),
        when_args=raw.get("when_args"),
        when_output=raw.get("when_output"),
        sync_todos=bool(raw.get("sync_todos", False)),
    )


def _observe_list(
    raw_list: Any, source: str, errors: list[str], warnings: list[str], known: frozenset[str]
) -> list[ObserveSpec]:
    if raw_list is None:
        return []
    if not isinstance(raw_list, list):
        errors.append(f"{source}: observe: must be a list")
        return []
    specs = [
        _observe(raw, f"{source}: observe[{i}]", errors, warnings, known) for i, raw in enumerate(raw_list)
    ]
    return [s for s in specs if s is not None]


def _transition_list(
    raw_list: Any, source: str, errors: list[str], warnings: list[str], known: frozenset[str]
) -> list[Transition]:
    if raw_list is None:
        return []
    if not isinstance(raw_list, list):
        errors.append(f"{source}: transitions: must be a list")
        return []
    transitions: list[Transition] = []
    for i, raw in enumerate(raw_list):
        where = f"{source}: transitions[{i}]"
        if not isinstance(raw, Mapping) or "when" not in raw:
            errors.append(f'{where}: must be a mapping with when (a condition or "gate")')
            continue
        if raw["when"] != "gate":
            _check_condition(raw["when"], f"{where}.when", errors, warnings, known)
        transitions.append(
            Transition(
                when=raw["when"],
                activate=_str_list(raw.get("activate"), f"{where}.activate", errors),
                deactivate=_str_list(raw.get("deactivate"), f"{where}.deactivate", errors),
            )
        )
    return transitions


def _int(value: Any, default: int, where: str, errors: list[str], minimum: int = 0) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        errors.append(f"{where}: must be an integer >= {minimum}")
        return default
    return value


def _front_matter(text: str, source: str) -> tuple[Any, str]:
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise FunctionLoadError([f"{source}: the file must start with a '---' line (YAML front matter)"])
    for end in range(1, len(lines)):
        if lines[end].strip() == "---":
            try:
                return load_yaml12("\n".join(lines[1:end]), source=source), "\n".join(
                    lines[end + 1 :]
                ).strip()
            except YAML12Error as exc:
                raise FunctionLoadError([str(exc)]) from None
    raise FunctionLoadError([f"{source}: the front matter is not closed by a '---' line"])


def parse_function_file(
    text: str, source: str, *, conditions: ConditionRegistry | None = None
) -> tuple[FunctionDef | None, list[str], list[str]]:
    """(definition or None, errors, warnings) for one file's text."""
    known = (conditions or ConditionRegistry()).known()
    errors: list[str] = []
    warnings: list[str] = []
    try:
        data, body = _front_matter(text, source)
    except FunctionLoadError as exc:
        return None, exc.errors, []
    if not isinstance(data, Mapping):
        return None, [f"{source}: the front matter must be a mapping"], []
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        errors.append(f"{source}: name: is required (a non-empty string)")
        name = ""
    for key in data:
        if key not in KNOWN_FIELDS:
            warnings.append(f"{source}: {key}: unknown field (ignored)")
    for key in ("gate", "continue_until"):
        if data.get(key) is not None:
            _check_condition(data[key], f"{source}: {key}", errors, warnings, known)
    observe = _observe_list(data.get("observe"), source, errors, warnings, known)
    transitions = _transition_list(data.get("transitions"), source, errors, warnings, known)
    definition = FunctionDef(
        name=str(name),
        description=str(data.get("description") or ""),
        gate=data.get("gate"),
        continue_until=data.get("continue_until"),
        continue_max=_int(data.get("continue_max"), 5, f"{source}: continue_max", errors),
        requires_evidence=_str_list(data.get("requires_evidence"), f"{source}: requires_evidence", errors),
        observe=tuple(observe),
        transitions=tuple(transitions),
        priority=_int(data.get("priority"), 50, f"{source}: priority", errors),
        state_schema_version=_int(
            data.get("state_schema_version"), 1, f"{source}: state_schema_version", errors, 1
        ),
        path=source,
        body=body,
        extra={k: v for k, v in data.items() if k not in KNOWN_FIELDS},
    )
    return (None if errors else definition), errors, warnings


def _read_definition(path: Path, errors: list[str]) -> str | None:
    """A definition file's text (newlines read as ``read_text`` reads them), or None with its problem added to
    ``errors``: not UTF-8 (the first bad byte and its offset), or unreadable (a directory named ``x.md``)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        errors.append(f"{path}: cannot be read: {exc.strerror or exc}")
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        errors.append(f"{path}: not UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})")
        return None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def load_function_dir(
    directory: str | Path, *, conditions: ConditionRegistry | None = None
) -> tuple[dict[str, FunctionDef], list[str]]:
    """Every ``*.md`` under ``directory`` (sorted); raises FunctionLoadError listing every problem.

    Returns (definitions by name, warnings)."""
    root = Path(directory)
    if not root.is_dir():
        raise FunctionLoadError([f"{root}: not a directory"])
    defs: dict[str, FunctionDef] = {}
    errors: list[str] = []
    warnings: list[str] = []
    for path in sorted(root.rglob("*.md")):
        if (text := _read_definition(path, errors)) is None:
            continue
        definition, errs, warns = parse_function_file(text, str(path), conditions=conditions)
        errors.extend(errs)
        warnings.extend(warns)
        if definition is None:
            continue
        if definition.name in defs:
            errors.append(
                f"{path}: name: {definition.name!r} is already defined in {defs[definition.name].path}"
            )
            continue
        defs[definition.name] = definition
    for definition in defs.values():
        for i, transition in enumerate(definition.transitions):
            for target in (*transition.activate, *transition.deactivate):
                if target not in defs:
                    errors.append(f"{definition.path}: transitions[{i}]: unknown function {target!r}")
    if errors:
        raise FunctionLoadError(errors, warnings)
    return defs, warnings
