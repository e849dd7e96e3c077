"""The layouts' machinery: a script's keys, arguments and repeated groups declared as dataclass fields (see
the package's docstring)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import field, fields
from operator import attrgetter
from typing import Any, ClassVar

__all__ = ["Layout", "ScriptCall", "arg", "group", "key"]

Arg = str | int | float | bytes


def key() -> Any:
    """A key of the script (``KEYS[i]``)."""
    return field(metadata={"lua": "key"})


def arg() -> Any:
    """An argument of the script (``ARGV[i]``)."""
    return field(metadata={"lua": "arg"})


def group() -> Any:
    """A repeated group: a sequence of layouts whose keys and arguments follow the fixed ones, item by item."""
    return field(metadata={"lua": "group"})


class Layout:
    """A script's (or a repeated group's) keys and arguments, in field order."""

    LUA: ClassVar[str] = ""  # a group's name in Lua (its strides are <LUA>_KEYS, <LUA>_ARGS)

    @classmethod
    def names(cls, kind: str) -> tuple[str, ...]:
        """The fields of ``kind`` (``key``, ``arg`` or ``group``), in order: worked out once per class, since
        every script call asks (``dataclasses.fields`` per call cost ~8% of a drained event's instructions)."""
        return _field_names(cls, kind)

    def keys(self) -> list[str]:
        out: list[str] = list(_values(self, "key"))
        for name in self.names("group"):
            for item in getattr(self, name):
                out += item.keys()
        return out

    def args(self) -> list[Arg]:
        out: list[Arg] = list(_values(self, "arg"))
        for name in self.names("group"):
            for item in getattr(self, name):
                out += item.args()
        return out

    @classmethod
    def lua_locals(cls) -> list[str]:
        """The Lua that names a script's fixed keys and arguments: ``local a, b = KEYS[1], KEYS[2]``."""
        return [
            _locals(names, table, lambda i: str(i + 1))
            for names, table in ((cls.names("key"), "KEYS"), (cls.names("arg"), "ARGV"))
            if names
        ]

    @classmethod
    def group_locals(cls, keys: str = "KEYS", args: str = "ARGV") -> list[str]:
        """The Lua that names one item's keys (from index ``k``) and arguments (from ``a``); with fixed sizes,
        the strides: ``local EVENT_KEYS, EVENT_ARGS = 2, 10``."""

        def at(base: str) -> Any:
            return lambda i: base if i == 0 else f"{base} + {i}"

        lines = [
            _locals(names, table, at(base))
            for names, table, base in ((cls.names("key"), keys, "k"), (cls.names("arg"), args, "a"))
            if names
        ]
        if not cls.names("group"):
            lines.append(
                f"local {cls.LUA}_KEYS, {cls.LUA}_ARGS = {len(cls.names('key'))}, {len(cls.names('arg'))}"
            )
        return lines


_FIELD_NAMES: dict[tuple[type, str], tuple[str, ...]] = {}


def _field_names(layout: type, kind: str) -> tuple[str, ...]:
    found = _FIELD_NAMES.get((layout, kind))
    if found is None:
        found = tuple(f.name for f in fields(layout) if f.metadata.get("lua") == kind)
        _FIELD_NAMES[(layout, kind)] = found
    return found


_GETTERS: dict[tuple[type, str], Callable[[Any], tuple[Any, ...]]] = {}


def _values(layout: Layout, kind: str) -> tuple[Any, ...]:
    """The values of ``layout``'s fields of ``kind``, in order, through one ``attrgetter`` per class and kind."""
    getter = _GETTERS.get((type(layout), kind))
    if getter is None:
        names = _field_names(type(layout), kind)
        if len(names) == 1:
            one = attrgetter(names[0])
            getter = lambda value: (one(value),)  # noqa: E731 (attrgetter of one name returns no tuple)
        elif names:
            getter = attrgetter(*names)
        else:
            getter = lambda value: ()  # noqa: E731
        _GETTERS[(type(layout), kind)] = getter
    return getter(layout)


def _locals(names: Sequence[str], table: str, index: Any) -> str:
    values = ", ".join(f"{table}[{index(i)}]" for i in range(len(names)))
    return f"local {', '.join(names)} = {values}"


class ScriptCall(Layout):
    """A call of one script (``SCRIPT``: its file, ``lua/<SCRIPT>.lua``)."""

    SCRIPT: ClassVar[str] = ""
