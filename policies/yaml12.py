"""Loading YAML the 1.2 way: only ``true``/``false`` are booleans, so a key such as ``on:`` stays the string
``on`` (PyYAML implements YAML 1.1, where ``on``, ``off``, ``yes``, ``no``, ``y``, ``n`` are booleans).

The loader is PyYAML's SafeLoader with the 1.1 boolean resolver replaced by the 1.2 core-schema one, and the
1.1 sexagesimal / underscore number forms left as strings.

Anchors and aliases (``&a`` / ``*a``) are refused where the parser meets the first one, before anything is
built: our files (function definitions, router configs) have no use for them, and nested aliases expand
exponentially (the "billion laughs" alias bomb: a few hundred bytes that build gigabytes).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

__all__ = ["YAML12Error", "load_yaml12"]


class YAML12Error(ValueError):
    """The text is not valid YAML; the message says where."""


class _Loader(yaml.SafeLoader):
    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        """Refuse an alias, or a node that declares an anchor, before composing it."""
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise yaml.composer.ComposerError(
                None,
                None,
                f"anchors and aliases are not allowed (found {'*' if isinstance(event, yaml.AliasEvent) else '&'}"
                f"{event.anchor})",
                event.start_mark,
            )
        return super().compose_node(parent, index)


_Loader.yaml_implicit_resolvers = {
    first: [
        (tag, regexp)
        for tag, regexp in resolvers
        if tag not in ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
    ]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789")
)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)


def _construct_int(loader: yaml.SafeLoader, node: yaml.Node) -> int:
    text = str(loader.construct_scalar(node))  # type: ignore[arg-type]
    if text.startswith("0o"):
        return int(text[2:], 8)
    if text.startswith("0x"):
        return int(text[2:], 16)
    return int(text)


_Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)


def load_yaml12(text: str, *, source: str = "<string>") -> Any:
    """Parse one YAML 1.2 document."""
    try:
        return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark is not None else source
        problem = getattr(exc, "problem", None) or str(exc)
        raise YAML12Error(f"{where}: invalid YAML: {problem}") from None
