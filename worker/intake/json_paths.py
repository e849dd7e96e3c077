"""Where in a value JSON fails: the path of its first value a rule refuses, as a dotted field (``payload.tags.2``).

The door names the field of a request body that is not strict JSON this way (producers/http/strict_json.py), and
the SDK's two producers name the field of a payload JSON cannot carry (a ``nan``, an ``inf``, a ``datetime``, a
``set``, an int too long) the same way, where ``json.dumps`` only says what went wrong, not where.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

__all__ = ["NOT_TEXT", "dotted", "first_path", "unencodable"]

NOT_TEXT = "holds a lone surrogate (\\ud800-\\udfff without its pair): not text"

# JSON's spelling of the numbers json.dumps(allow_nan=False) refuses, as the door's message quotes them
_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def first_path(data: Any, bad: Callable[[Any], bool]) -> list[str | int] | None:
    """The path of the first value (or object key) in document order for which ``bad`` holds; iterative (no
    recursion, whatever the depth), and each container is visited once (a value that contains itself ends)."""
    stack: list[tuple[list[str | int], Any]] = [([], data)]
    seen: set[int] = set()
    while stack:
        path, value = stack.pop()
        if bad(value):
            return path
        children: list[tuple[list[str | int], Any]] = []
        if isinstance(value, dict | list | tuple):
            if id(value) in seen:
                continue
            seen.add(id(value))
        if isinstance(value, dict):
            for key, item in value.items():
                if bad(key):
                    return [*path, key]
                children.append(([*path, key], item))
        elif isinstance(value, list | tuple):
            children = [([*path, index], item) for index, item in enumerate(value)]
        stack.extend(reversed(children))
    return None


def dotted(path: list[str | int]) -> str | None:
    """``["payload", "tags", 2]`` → ``payload.tags.2`` (the body rule's field paths); a lone surrogate in a key
    is shown escaped."""
    shown = (str(part).encode("utf-8", "backslashreplace").decode("utf-8") for part in path)
    return ".".join(shown) or None


def _scalar_refused(value: Any) -> bool:
    if isinstance(value, dict | list | tuple):
        return False
    try:
        json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError):  # a nan or an inf, a datetime or a set, an int too long, a lone surrogate
        return True
    return False


def unencodable(value: Any, field: str) -> tuple[str, str] | None:
    """(field, message) for the first value in ``value`` (found under ``field``) that JSON cannot carry, or None
    when no single value is to blame (a key of a type JSON has no form for, a structure too deep)."""
    path = first_path(value, _scalar_refused)
    if path is None:
        return None
    at = ".".join(filter(None, [field, dotted(path)]))
    found: Any = value
    for part in path:
        found = found[part]
    culprit = found if _scalar_refused(found) else path[-1]  # else the last step's key is to blame
    if isinstance(culprit, float) and not math.isfinite(culprit):
        return at, f"{at} is {_NON_FINITE[repr(culprit)]}: JSON numbers must be finite (no NaN or Infinity)"
    try:
        json.dumps(culprit, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except UnicodeEncodeError:
        return at, f"{at} {NOT_TEXT}"
    except (TypeError, ValueError) as exc:
        return at, f"{at} must be JSON: {exc}"
    return None  # not reached: the path ends at a value or a key the rule refused
