"""The shipped plugins' source types and payload schemas, as the door tests walk them: every declared source type,
a minimal payload built from the schemas' JSON Schema (required fields only), and every required field's path.

Nothing here is a hand list: a field a plugin adds to a schema is walked without editing a test.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pydantic import BaseModel

from worker.plugin import Plugin
from worker.runtime.assembly import load_plugins
from worker.settings import Settings

__all__ = [
    "minimal_payload",
    "required_paths",
    "schemas_of",
    "shipped_plugins",
    "shipped_source_types",
    "without",
]

Schema = dict[str, Any]


def shipped_plugins(settings: Settings) -> list[Plugin]:
    """The shipped plugins only (``AGENT_SIGNAL_PLUGINS`` left out)."""
    return load_plugins(settings.model_copy(update={"plugins": []}), check_env=False)


def shipped_source_types(plugins: Sequence[Plugin]) -> list[str]:
    """Every source type the plugins declare, sorted."""
    return sorted({t for p in plugins for t in p.source_types})


def schemas_of(plugins: Sequence[Plugin], source_type: str) -> list[type[BaseModel]]:
    """Each plugin's payload model for ``source_type`` (the door checks every one)."""
    return [p.payload_schemas[source_type] for p in plugins if source_type in p.payload_schemas]


def _resolve(schema: Schema, root: Schema) -> Schema:
    while "$ref" in schema:
        schema = root["$defs"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def _minimal(schema: Schema, root: Schema) -> Any:
    """The smallest value ``schema`` accepts: required properties only, the first enum member, the least number."""
    schema = _resolve(schema, root)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            branch = next(b for b in schema[key] if _resolve(b, root).get("type") != "null")
            return _minimal(branch, root)
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties", {})
        return {name: _minimal(props[name], root) for name in schema.get("required", [])}
    if kind == "array":
        return []
    if kind == "string":
        return "x" * max(1, int(schema.get("minLength", 1)))
    if kind in ("integer", "number"):
        return schema.get("minimum", 0)
    if kind == "boolean":
        return False
    raise AssertionError(f"no minimal value for schema {schema}")


def _merge(into: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    for key, value in other.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into.setdefault(key, value)
    return into


def minimal_payload(models: Sequence[type[BaseModel]]) -> dict[str, Any]:
    """A payload every model accepts that holds only what some model requires."""
    payload: dict[str, Any] = {}
    for model in models:
        schema = model.model_json_schema()
        _merge(payload, _minimal(schema, schema))
    for model in models:
        model.model_validate(payload)  # a schema the generator misread fails here, not in the walk
    return payload


def _required(schema: Schema, root: Schema, path: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    schema = _resolve(schema, root)
    props = schema.get("properties", {})
    for name in schema.get("required", []):
        yield (*path, name)
        yield from _required(props[name], root, (*path, name))


def required_paths(models: Sequence[type[BaseModel]]) -> list[tuple[str, ...]]:
    """Every required field's path under the payload (``("tool", "identifier")``), nested ones included."""
    paths: dict[tuple[str, ...], None] = {}
    for model in models:
        schema = model.model_json_schema()
        paths.update(dict.fromkeys(_required(schema, schema, ())))
    return list(paths)


def without(payload: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    """A deep copy of ``payload`` without the field at ``path``."""
    head, *rest = path
    copy = dict(payload)
    if rest:
        copy[head] = without(copy[head], tuple(rest))
    else:
        del copy[head]
    return copy
