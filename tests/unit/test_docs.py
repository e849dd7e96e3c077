"""The documentation holds together: README stays short, every relative link in README.md and docs/*.md points at
a file (and a heading) that exists, and every command, setting and HTTP route is documented on a page a reader can
reach from README by following links. A new verb, setting or route without its row fails here, naming it.

Headings become anchors the way GitHub renders them (lower case, punctuation dropped, spaces to hyphens, repeats
numbered); links and names inside code blocks and code spans are not links, but code spans still count as
documentation of a name.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

from pydantic_settings import BaseSettings

from producers.cli.main import build_parser
from producers.http.app import create_web_app
from tests.support.routes import flat_routes
from worker.runtime.assembly import load_plugins, section_models
from worker.settings import ENV_PREFIX, OTHER_ENV_NAMES, Settings

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
README_MAX_LINES = 300
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)
ROUTE = re.compile(r"\b(GET|POST|PUT|PATCH|DELETE) (/[^\s`|,;)?]*)")
PARAMETER = re.compile(r"\{[^}]*\}")


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _prose(markdown: str) -> str:
    """The markdown without its code blocks and code spans (where a link is not a link)."""
    return CODE_SPAN.sub("", FENCE.sub("", markdown))


def _anchors(markdown: str) -> set[str]:
    """GitHub's anchors of the headings: lower case, punctuation dropped, spaces to hyphens, repeats numbered."""
    seen: dict[str, int] = {}
    anchors = set()
    for heading in HEADING.findall(FENCE.sub("", markdown)):
        plain = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
        slug = re.sub(r"[^\w\- ]", "", plain.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _relative_links(path: Path) -> Iterator[tuple[Path, str]]:
    """Each relative link of a markdown file: (target file, anchor or "")."""
    for target in LINK.findall(_prose(_text(path))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        yield ((path.parent / file_part).resolve() if file_part else path), anchor


def _reachable() -> list[Path]:
    """README and every markdown file in the repository reached from it by relative links."""
    found, todo = [README], [README]
    while todo:
        for target, _ in _relative_links(todo.pop()):
            if target.suffix == ".md" and target.is_file() and target not in found:
                found.append(target)
                todo.append(target)
    return found


def _documented() -> str:
    return "\n".join(_text(path) for path in _reachable())


def test_readme_stays_short() -> None:
    """README is the engine's front page: under 300 lines; the details live in docs/."""
    lines = len(_text(README).splitlines())
    assert lines < README_MAX_LINES, f"README.md has {lines} lines"


def test_every_relative_link_resolves() -> None:
    """Every relative link in README.md and docs/*.md names an existing file, and its anchor a heading there."""
    broken = []
    for page in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        for target, anchor in _relative_links(page):
            where = f"{page.relative_to(ROOT)} → {target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}"
            if not target.exists():
                broken.append(f"{where}: no such file")
            elif anchor and (target.suffix != ".md" or anchor not in _anchors(_text(target))):
                broken.append(f"{where}#{anchor}: no such heading")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_the_family_pages_are_reachable_from_readme() -> None:
    """README links every page under docs/ that a reader needs, directly or through another page."""
    reachable = {path.relative_to(ROOT).as_posix() for path in _reachable()}
    pages = {path.relative_to(ROOT).as_posix() for path in (ROOT / "docs").glob("*.md")}
    assert pages <= reachable, f"not reachable from README: {sorted(pages - reachable)}"


def test_every_setting_is_documented() -> None:
    """Each setting of the engine, of the door's and the sessions' sections and of the shipped plugins has a
    table row (under one of its names) on a reachable page: docs/settings.md, or README's table of the essential
    ones."""
    docs = "\n".join(line for line in _documented().splitlines() if line.startswith("|"))
    models: list[type[BaseSettings]] = [Settings]
    models += [
        *section_models(),
        *(p.settings for p in load_plugins(Settings(), check_env=False) if p.settings),
    ]
    fields = [{name} for name in OTHER_ENV_NAMES]
    for model in models:
        fields += [_names(model, field) for field in model.model_fields]
    missing = [
        " / ".join(sorted(names))
        for names in fields
        if not any(re.search(rf"(?<![A-Z_]){name}(?![A-Z_])", docs) for name in names)
    ]
    assert not missing, f"settings without a row in the docs: {missing}"


def _names(model: type[BaseSettings], field: str) -> set[str]:
    """The environment names one field of a settings model reads (its aliases, else ``AGENT_SIGNAL_<FIELD>``)."""
    choices = getattr(model.model_fields[field].validation_alias, "choices", None)
    return {str(choice) for choice in choices} if choices else {f"{ENV_PREFIX}{field.upper()}"}


def _verbs(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every leaf command of the CLI, as its words (``("dlq", "redrive")``)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield words
    for action in subs:
        for name, sub in action.choices.items():
            yield from _verbs(sub, (*words, name))


def test_every_command_is_documented() -> None:
    """Each ``agent-signal`` verb and each ``make`` target appears, spelled in full, on a reachable page."""
    docs = _documented()
    commands = ["agent-signal " + " ".join(words) for words in _verbs(build_parser())]
    phony = re.search(r"^\.PHONY:(.*)$", _text(ROOT / "Makefile"), re.M)
    assert phony is not None
    commands += [f"make {target}" for target in phony.group(1).split()]
    missing = [c for c in commands if not re.search(rf"(?<![\w-]){re.escape(c)}(?![\w-])", docs)]
    assert not missing, f"commands the docs never name: {missing}"


def test_every_route_is_documented() -> None:
    """Each route of the HTTP app appears as ``METHOD /path`` on a reachable page (path parameters by any name)."""
    documented = {(method, PARAMETER.sub("{}", path)) for method, path in ROUTE.findall(_documented())}
    routes = {
        (method, PARAMETER.sub("{}", route.path))
        for route in flat_routes(create_web_app(Settings()).routes)
        for method in getattr(route, "methods", None) or ()
        if method != "HEAD"
    }
    missing = sorted(f"{method} {path}" for method, path in routes - documented)
    assert not missing, f"routes the docs never name: {missing}"


def test_every_engine_key_family_is_in_the_key_table() -> None:
    """docs/keys.md names every family and singleton the engine writes (a walk of a live Redis found
    ``worker-info`` there and not in the table, which README says lists every key)."""
    from worker.keys.layout import ENGINE_FAMILIES, ENGINE_SINGLETONS

    table = (ROOT / "docs" / "keys.md").read_text(encoding="utf-8")
    missing = [
        name
        for name in (*ENGINE_FAMILIES, *ENGINE_SINGLETONS)
        if not re.search(
            r"(?<![\w-])" + re.escape(name) + ("" if name.endswith(":") else r"(?![\w-])"), table
        )
    ]
    assert not missing, f"docs/keys.md does not name: {missing}"


def test_make_help_lists_every_target() -> None:
    """``make help`` names each ``.PHONY`` target (as ``make <target>`` at the start of one of its lines)."""
    text = _text(ROOT / "Makefile")
    phony = re.search(r"^\.PHONY:(.*)$", text, re.M)
    assert phony is not None
    listed = set(re.findall(r'^\t@echo "make ([\w-]+)', text, re.M))
    missing = [target for target in phony.group(1).split() if target not in listed]
    assert not missing, f"targets make help does not list: {missing}"


def test_the_python_samples_are_lint_clean() -> None:
    """Each ```python block of README.md and docs/*.md compiles, and has no unused import or undefined name
    (ruff's F rules): a plugin author copies the sample in plugins.md, which imported six names it never used."""
    import subprocess
    import sys

    samples = [
        (path, block)
        for path in [README, *sorted((ROOT / "docs").glob("*.md"))]
        for block in re.findall(r"^```python\n(.*?)^```", _text(path), re.M | re.S)
    ]
    assert samples, "no python sample found"
    for path, block in samples:
        compile(block, str(path), "exec")
        found = subprocess.run(
            [sys.executable, "-m", "ruff", "check", "--select", "F", "--stdin-filename", "sample.py", "-"],
            input=block,
            capture_output=True,
            text=True,
            check=False,
        )
        assert found.returncode == 0, f"{path.relative_to(ROOT)}:\n{found.stdout}"
