"""``@record``: an immutable record to the type checker, a plain slotted dataclass at run time.

A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__`` (a wrapper, a check that no
C-level setter is skipped, a type lookup of the name): ~120 ns a field against ~20 for a plain one (timeit,
seven fields: 1.10 us against 0.24). The drain builds about 57 frozen fields per event (its commit's layouts
and its reply records), so ``@record`` keeps what ``frozen=True`` gave where it is checked, mypy --strict over
the four packages and bench/, which refuses any assignment to a field (``dataclass_transform(frozen_default=True)``),
and drops it at run time (where a misspelt field of a Layout, which has a ``__dict__``, is now accepted too).
Records stay hashable by their fields, as frozen dataclasses are. For the hot records only: everything else
keeps ``@dataclass(frozen=True)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar, dataclass_transform

__all__ = ["record"]

_T = TypeVar("_T")


@dataclass_transform(frozen_default=True)
def record(cls: type[_T]) -> type[_T]:
    """A frozen dataclass to mypy; ``@dataclass(slots=True, unsafe_hash=True)`` to Python."""
    return dataclass(slots=True, unsafe_hash=True)(cls)
