"""The Lua scripts as files (worker/store/lua/): each file opens with the named locals of its call's layout
(worker/store/calls/) and reads its repeated groups with the lines the layout writes, every reply code it names
exists in worker/store/replies.py, every piece it requires exists, one script commits, and no Python string of
the packages holds Lua of more than a few lines."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest
from redis import Redis

from worker.store import calls, loader
from worker.store.calls import Layout, ScriptCall
from worker.store.loader import LuaError, LuaSource, load_script, requires_of, script_text
from worker.store.replies import ENUMS, CommitCode, HeadCode, UnknownCode, inline_codes
from worker.store.scripts import CONSTANTS

ROOT = Path(__file__).resolve().parents[4]
LUA = ROOT / "worker" / "store" / "lua"
PACKAGES = ("worker", "producers", "policies", "sessions")

CALLS = [c for _, c in inspect.getmembers(calls, inspect.isclass) if issubclass(c, ScriptCall) and c.SCRIPT]
GROUPS_NOT_READ = {
    calls.Touched
}  # JOURNAL_APPLY's touched keys route the call to its slot; the Lua writes by the commands


def _flat(text: str) -> str:
    return " ".join(text.split())


def _with_libraries(name: str) -> str:
    """The script's text and every library piece it requires, transitively."""
    seen: set[str] = set()
    texts = [script_text("worker.store", name)]
    todo = requires_of(texts[0])
    while todo:
        piece = todo.pop()
        if piece not in seen:
            seen.add(piece)
            text = script_text("worker.store", f"lib/{piece}")
            texts.append(text)
            todo += requires_of(text)
    return "\n".join(texts)


def _groups(layout: type[Layout]) -> list[type[Layout]]:
    """The group layouts a call (or group) repeats, nested ones included."""
    found: list[type[Layout]] = []
    for name in layout.names("group"):
        hint = layout.__dataclass_fields__[name].type  # type: ignore[attr-defined]
        item = getattr(calls, re.findall(r"Sequence\[(\w+)\]", str(hint))[0])
        found += [item, *_groups(item)]
    return found


@pytest.mark.parametrize("call", CALLS, ids=lambda c: c.SCRIPT)
def test_each_script_opens_with_its_calls_named_locals(call: type[ScriptCall]) -> None:
    """``local lease, fence_key = KEYS[1], KEYS[2]``: the file names its keys and arguments as its call orders them."""
    text = _flat(script_text("worker.store", call.SCRIPT))
    for line in call.lua_locals():
        assert _flat(line) in text, f"{call.SCRIPT}.lua does not open with: {line}"


@pytest.mark.parametrize("call", CALLS, ids=lambda c: c.SCRIPT)
def test_each_group_is_read_with_its_layouts_locals(call: type[ScriptCall]) -> None:
    """A repeated group's item is read with the locals (and strides) its layout writes, in the script or a piece."""
    text = _flat(_with_libraries(call.SCRIPT))
    for group in _groups(call):
        if group in GROUPS_NOT_READ:
            continue
        forms = [group.group_locals(), group.group_locals("keys", "args")]
        assert any(all(_flat(line) in text for line in form) for form in forms), (
            call.SCRIPT,
            group.LUA,
            forms,
        )


def test_every_script_file_has_a_call_and_loads() -> None:
    """No orphan file: each top-level ``.lua`` is one call's, and joins with its pieces."""
    files = {p.stem for p in LUA.glob("*.lua")}
    assert files == {c.SCRIPT for c in CALLS}
    for name in files:
        assert "return" in load_script(name, constants=CONSTANTS)


def test_reply_codes_named_in_lua_exist() -> None:
    """``CommitCode.STALE_FENCE`` in Lua is a member of the IntEnum of that name (the loader writes its number)."""
    members = {enum.__name__: {m.name for m in enum} for enum in ENUMS}
    used = set()
    for path in [*LUA.glob("*.lua"), *LUA.glob("lib/*.lua")]:
        for enum, member in re.findall(r"\b(" + "|".join(members) + r")\.([A-Z_]+)\b", path.read_text()):
            assert member in members[enum], f"{path.name}: {enum}.{member}"
            used.add(enum)
    assert used == set(members)


def test_one_script_commits() -> None:
    """A lone event is a run of one: there is one commit script, and nothing else sets an event done."""
    setters = [p.name for p in LUA.rglob("*.lua") if "'state', 'done'" in p.read_text()]
    assert setters == ["commit.lua"]


def _strings_with_lua(tree: ast.AST) -> list[tuple[int, int]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "redis.call" in node.value:
            found.append((node.lineno, len(node.value.strip().splitlines())))
    return found


def test_no_python_string_holds_more_than_a_few_lines_of_lua() -> None:
    """Lua lives in ``.lua`` files, read as code; a Python string may hold at most 10 lines of it."""
    offenders = [
        f"{path.relative_to(ROOT)}:{line} ({n} lines)"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for line, n in _strings_with_lua(ast.parse(path.read_text()))
        if n > 10
    ]
    assert offenders == []


def test_reply_codes_are_written_as_numbers() -> None:
    """The loader writes each code's number where the Lua names it; no script builds an enum table per call."""
    assert inline_codes("if r[1] == CommitCode.ENDED then return {HeadCode.EMPTY} end") == (
        f"if r[1] == ({int(CommitCode.ENDED)}) then return {{({int(HeadCode.EMPTY)})}} end"
    )
    for name in {p.stem for p in LUA.glob("*.lua")}:
        text = load_script(name, constants=CONSTANTS)
        assert not re.search(r"\b(" + "|".join(e.__name__ for e in ENUMS) + r")\b", text), name


def test_a_written_code_reads_as_its_number_in_any_place(redis_client: Redis) -> None:
    """A negative code after a minus (a bare ``--3`` would open a comment) and a code before ``..`` (a bare
    ``2..`` is a malformed number) still read as their numbers."""
    lua = inline_codes("return {0-CommitCode.REFUSED, CommitCode.ENDED..'x', -ReleaseCode.HELD_BY_ANOTHER}")
    assert redis_client.eval(lua, 0) == [-int(CommitCode.REFUSED), f"{int(CommitCode.ENDED)}x", 1]


@pytest.mark.parametrize("lua", ["return CommitCode.COMMITED", "return HeadCode", "local codes = ApplyCode"])
def test_a_code_the_enum_lacks_fails_at_load(lua: str) -> None:
    """A misspelt member (or a bare enum: only members are written) is an error naming it, not a nil at run
    time."""
    with pytest.raises(UnknownCode, match=re.escape(lua.split()[-1])):
        inline_codes(lua)


def test_a_bad_code_in_a_piece_names_that_piece(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loader's error names the file the misspelt code is in (a library piece, here)."""
    real = loader.script_text

    def with_typo(package: str, path: str) -> str:
        text = real(package, path)
        return text + "\nlocal typo = HeadCode.TAKN\n" if path == "lib/peek" else text

    monkeypatch.setattr(loader, "script_text", with_typo)
    loader._load.cache_clear()
    try:
        with pytest.raises(LuaError, match=r"lua/lib/peek\.lua: 'HeadCode\.TAKN'"):
            load_script("commit", constants=CONSTANTS)
    finally:
        loader._load.cache_clear()


def test_a_lua_source_and_an_equal_string_are_two_constants() -> None:
    """The loader's cache tells a constant that is code from an equal string (they compare equal as str)."""
    as_code = load_script("pop_acquire", constants={**CONSTANTS, "scope_keys": LuaSource("function() end")})
    as_text = load_script("pop_acquire", constants={**CONSTANTS, "scope_keys": "function() end"})
    assert "local scope_keys = function() end\n" in as_code
    assert "local scope_keys = 'function() end'\n" in as_text
    with pytest.raises(LuaError, match="not True"):
        load_script("pop_acquire", constants={"scope_keys": True})
