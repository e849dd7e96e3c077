"""Code shape, a backstop for worker/, policies/, sessions/, producers/, bench/ and tests/: no module over 600
lines, no function or method over 80 lines outside declarative tables (tests included), no folder over 16
modules (``.py`` files other than ``__init__.py``; a folder that grows becomes rooms, subpackages by concept). It is not how modules are cut: a module holds one concept
and a concept that grows becomes a subpackage (STYLE.md); a 400-line gauge obeyed to the line cut concepts
into size-driven siblings that imported each other in circles.

Every ``.py`` file is parsed with :mod:`ast`; a module's size is its line count, a function's is from its
``def`` line to its last line (decorators excluded, nested functions counted in their own right as well as
inside their parent); a folder's modules are its own ``.py`` files, not its subpackages'. Each test fails listing
every offender at once.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("worker", "policies", "sessions", "producers", "bench", "tests")
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
MAX_FOLDER_MODULES = 16

# (path relative to the repository root, qualified name) → why the function is a declarative table. Only a
# function whose body is a single ``return`` of a literal list/tuple/dict qualifies; keep this list short.
DECLARATIVE_TABLES: dict[tuple[str, str], str] = {
    (
        "policies/self_iteration/bundle.py",
        "self_iteration_policies",
    ): "one return of the literal list of Policy registrations (event type → handler id → handler)",
}

Function = ast.FunctionDef | ast.AsyncFunctionDef


def _paths() -> Iterator[Path]:
    for package in PACKAGES:
        yield from sorted(p for p in (ROOT / package).rglob("*.py") if "node_modules" not in p.parts)


def _modules() -> Iterator[tuple[str, str]]:
    for path in _paths():
        yield path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8")


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, Function]]:
    """Every function and method with its qualified name (``Class.method``, ``outer.<locals>.inner``)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield prefix + node.name, node
            yield from _functions(node, f"{prefix}{node.name}.<locals>.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            yield from _functions(node, prefix)


def _length(node: Function) -> int:
    assert node.end_lineno is not None
    return node.end_lineno - node.lineno + 1


def _is_declarative_table(node: Function) -> bool:
    """The body (after an optional docstring) is one ``return`` of a literal list, tuple or dict."""
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return (
        len(body) == 1
        and isinstance(body[0], ast.Return)
        and isinstance(body[0].value, ast.List | ast.Tuple | ast.Dict)
    )


def test_no_module_over_the_line_limit() -> None:
    """Split a module that grows past the limit along its concepts (see worker/telemetry*.py)."""
    offenders = [
        f"{path}: {lines} lines"
        for path, text in _modules()
        if (lines := len(text.splitlines())) > MAX_MODULE_LINES
    ]
    assert not offenders, f"modules over {MAX_MODULE_LINES} lines:\n" + "\n".join(offenders)


def test_no_function_over_the_line_limit() -> None:
    """Declarative tables are exempt only through DECLARATIVE_TABLES."""
    offenders = []
    for path, text in _modules():
        for name, node in _functions(ast.parse(text, filename=path)):
            length = _length(node)
            if length > MAX_FUNCTION_LINES and (path, name) not in DECLARATIVE_TABLES:
                offenders.append(f"{path}:{node.lineno} {name}: {length} lines")
    assert not offenders, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(offenders)


def test_allow_listed_functions_are_declarative_tables() -> None:
    """Each DECLARATIVE_TABLES entry names an existing function that, if over the limit, really is a table."""
    found: dict[tuple[str, str], Function] = {}
    for path, text in _modules():
        for name, node in _functions(ast.parse(text, filename=path)):
            if (path, name) in DECLARATIVE_TABLES:
                found[path, name] = node
    problems = [
        f"{path} {name}: no such function (drop it)"
        for path, name in DECLARATIVE_TABLES
        if (path, name) not in found
    ]
    problems += [
        f"{path}:{node.lineno} {name}: not a single return of a literal table"
        for (path, name), node in found.items()
        if _length(node) > MAX_FUNCTION_LINES and not _is_declarative_table(node)
    ]
    assert not problems, "DECLARATIVE_TABLES entries to fix:\n" + "\n".join(problems)


def test_no_folder_over_the_module_limit() -> None:
    """A folder is a room of related concepts: past 16 modules, split it into subpackages by concept (each with
    an ``__init__.py`` whose docstring says what lives there), as tests/integration/ and policies/self_iteration/
    are."""
    modules: Counter[str] = Counter(
        path.parent.relative_to(ROOT).as_posix() for path in _paths() if path.name != "__init__.py"
    )
    offenders = [f"{folder}/: {n} modules" for folder, n in sorted(modules.items()) if n > MAX_FOLDER_MODULES]
    assert not offenders, f"folders over {MAX_FOLDER_MODULES} modules:\n" + "\n".join(offenders)
