"""`worker.keys.layout.Keys` builds every Redis key: a test that fails on a key string built anywhere else.

It scans the sources of the four packages for the ways a key gets built by hand: an f-string or a
concatenation that starts from the configured prefix (``keys.prefix``, ``settings.key_prefix``), and Lua
that appends a key family to a prefix (``.. 'ev:'``). Keys hands whole keys (or ``Keys.event_prefix``) to
everything else, including the scripts.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
PACKAGES = ("worker", "policies", "sessions", "producers")
PREFIX_ATTRS = {"prefix", "key_prefix", "event_prefix", "broker_prefix"}
DEFAULT_PREFIX = "agent-signal:"  # a hard-coded key under the default prefix
LUA_CONCAT = re.compile(r"\.\.\s*'[a-z-]+:'")


def _uses_prefix(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr in PREFIX_ATTRS


def _hand_built(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) and any(
            isinstance(v, ast.FormattedValue) and _uses_prefix(v.value) for v in node.values
        ):
            lines.append(node.lineno)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            if _uses_prefix(node.left) or _uses_prefix(node.right):
                lines.append(node.lineno)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if LUA_CONCAT.search(node.value) or node.value.startswith(DEFAULT_PREFIX):
                lines.append(node.lineno)
    return lines


def test_no_key_is_built_outside_worker_keys() -> None:
    """Every key string comes from the keys room, worker/keys/ (file:line of each offender otherwise)."""
    offenders = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.parent == ROOT / "worker" / "keys" or path == ROOT / "worker" / "settings.py":
                continue  # the key builders (the keys room), and where the default prefix is declared
            text = path.read_text()
            lines = text.splitlines()
            offenders += [
                f"{path.relative_to(ROOT)}:{n}"
                for n in _hand_built(ast.parse(text))
                if "# not a key" not in lines[n - 1]  # an id in a key-like shape, marked where it is built
            ]
    assert offenders == []


def test_the_scan_catches_the_ways_keys_get_built() -> None:
    """The detector itself: an f-string on keys.prefix, a concatenation, and Lua concatenation are caught."""
    sample = (
        'a = f"{keys.prefix}procedure:{scope}"\n'
        'b = settings.key_prefix + "broker:"\n'
        "c = \"local ek = prefix .. 'ev:' .. id\"\n"
        'd = f"{prefix}:{session}"\n'
        'e = "agent-signal:stats"\n'
    )
    assert _hand_built(ast.parse(sample)) == [1, 2, 3, 5]
