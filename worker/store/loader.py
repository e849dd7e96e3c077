"""Loading the Lua scripts from their files (``worker/store/lua/*.lua``, package data).

A script's file opens with its contract in comments, a ``-- requires: a, b`` line naming the library pieces it
uses (``lua/lib/<name>.lua``, each of which may require others), and named locals for its KEYS and ARGV (the
layout its call declares in worker/store/calls/; a test holds each file to it). :func:`load_script` joins, in
this order: those of the named constants the caller gives that the script names (a :class:`LuaSource` one is
Lua code), each required piece once (what it requires first), and the script itself. In the style of
dramatiq's ``dispatch.lua``: a file a reviewer reads as code, one Redis ``EVALSHA`` as before. The reply codes
it names (``CommitCode.COMMITTED``) are written as their numbers (worker/store/replies.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from importlib import resources

from worker.store.replies import UnknownCode, inline_codes

__all__ = ["Constant", "LuaError", "LuaSource", "load_script", "requires_of", "script_text"]

REQUIRES = re.compile(r"^-- requires:(.*)$", re.MULTILINE)
NAME = re.compile(r"[a-z_][a-z0-9_]*")
LIBRARY_PACKAGE = "worker.store"


class LuaError(ValueError):
    """A script or library piece that is missing, or a ``requires`` line that names no piece."""


def script_text(package: str, path: str) -> str:
    """The text of ``lua/<path>.lua`` in ``package``'s data."""
    *folders, name = path.split("/")
    try:
        return str(resources.files(package).joinpath("lua", *folders, f"{name}.lua").read_text())
    except FileNotFoundError:
        raise LuaError(f"no Lua file lua/{path}.lua in {package}") from None


def requires_of(text: str) -> list[str]:
    """The library pieces a file's ``-- requires:`` lines name, in order."""
    names: list[str] = []
    for line in REQUIRES.findall(text):
        for name in (part.strip() for part in line.split(",")):
            if not NAME.fullmatch(name):
                raise LuaError(f"-- requires: {line.strip()!r} names no library piece")
            names.append(name)
    return names


def _library(package: str, names: list[str], seen: set[str], out: list[str]) -> None:
    for name in names:
        if name in seen:
            continue
        seen.add(name)
        try:
            text = script_text(package, f"lib/{name}")
        except LuaError:
            text = script_text(LIBRARY_PACKAGE, f"lib/{name}")  # the engine's pieces serve every package
        _library(package, requires_of(text), seen, out)
        out.append(f"-- lib/{name}.lua\n{_codes(text, f'lua/lib/{name}.lua')}")


def _codes(text: str, where: str) -> str:
    try:
        return inline_codes(text, where)
    except UnknownCode as exc:
        raise LuaError(str(exc)) from None


class LuaSource(str):
    """A constant whose value is Lua code (a function expression, say), written as it is rather than quoted."""


Constant = int | str  # a LuaSource is a str


@cache
def _load(package: str, name: str, constants: tuple[tuple[str, str], ...]) -> str:
    text = script_text(package, name)
    body: list[str] = []
    _library(package, requires_of(text), set(), body)
    body.append(f"-- {name}.lua\n{_codes(text, f'lua/{name}.lua')}")
    code = "".join(body)
    # only the constants the script names: each is a local of its chunk, made on every call (issue 29)
    declared = [f"local {k} = {v}\n" for k, v in constants if re.search(rf"\b{re.escape(k)}\b", code)]
    return "".join([*declared, code])


def _lua_value(value: Constant) -> str:
    """A constant as Lua: a number, a quoted string, or a :class:`LuaSource` as it is."""
    if isinstance(value, bool):
        raise LuaError(f"a constant is a number or a string, not {value!r}")
    if isinstance(value, LuaSource):
        return str(value)
    return (
        str(value) if isinstance(value, int) else "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    )


def load_script(
    name: str, *, package: str = LIBRARY_PACKAGE, constants: Mapping[str, Constant] | None = None
) -> str:
    """The whole source of script ``name`` (``lua/<name>.lua`` of ``package``) as Redis runs it."""
    # rendered before the cache: a LuaSource and an equal str are one key to it, not one constant
    rendered = tuple(sorted((k, _lua_value(v)) for k, v in (constants or {}).items()))
    return _load(package, name, rendered)
