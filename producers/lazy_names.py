"""A package's names imported when first asked for (PEP 562), for ``producers`` and ``producers.sdk``.

``python -m producers.cli`` imports ``producers`` first, and every CLI command and worker imported the SDK's
modules whether it used them or not (docs/decisions.md, "Processes start lighter"). The package's ``__getattr__``
and ``__dir__`` are set into its namespace here rather than written with ``def`` there: mypy reads a module-level
``def __getattr__`` as "every name exists", and ``from producers import HttpProduer`` then passed ``--strict``;
set this way, mypy checks each name against the package's ``TYPE_CHECKING`` imports.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, MutableMapping
from typing import Any

__all__ = ["install"]


def install(namespace: MutableMapping[str, Any], homes: Mapping[str, str]) -> None:
    """Give the package whose globals are ``namespace`` a ``__getattr__`` that imports each name of ``homes``
    (name → its module) when first asked for, and keeps it, and a ``__dir__`` that lists them."""
    package = namespace["__name__"]

    def lazy(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        namespace[name] = value  # asked once
        return value

    def listed() -> list[str]:
        return sorted({*namespace, *homes})

    namespace["__getattr__"] = lazy
    namespace["__dir__"] = listed
