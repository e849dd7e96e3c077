"""The web UI's files (producers/ui/): each one is served by ``/ui/{name}`` (producers/http/routes/ui.py
``UI_FILES``), each script is loaded by index.html once with app.js last (the page files only define
functions; app.js starts the page), and none is over the project's 600-line module limit, so a file split by
concept cannot be left unserved or unloaded."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

from producers.http.routes.ui import UI_DIR, UI_FILES

MAX_FILE_LINES = 600
TYPES = {".js": "text/javascript", ".css": "text/css"}


class _Scripts(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.sources: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        src = dict(attrs).get("src")
        if tag == "script" and src is not None:
            self.sources.append(src)


def _files() -> list[Path]:
    return sorted(p for p in UI_DIR.iterdir() if p.is_file() and p.name != "index.html")


def test_every_ui_file_is_served_with_its_type() -> None:
    on_disk = {p.name: TYPES.get(p.suffix, "?") for p in _files()}
    assert on_disk == UI_FILES


def test_index_loads_every_script_once_and_app_js_last() -> None:
    parser = _Scripts()
    parser.feed((UI_DIR / "index.html").read_text(encoding="utf-8"))
    scripts = sorted(name for name, kind in UI_FILES.items() if kind == "text/javascript")
    assert sorted(parser.sources) == [f"/ui/{name}" for name in scripts]
    assert parser.sources[-1] == "/ui/app.js"


def test_no_ui_file_over_the_line_limit() -> None:
    offenders = [
        f"{p.name}: {lines} lines"
        for p in _files()
        if (lines := len(p.read_text(encoding="utf-8").splitlines())) > MAX_FILE_LINES
    ]
    assert not offenders, f"UI files over {MAX_FILE_LINES} lines:\n" + "\n".join(offenders)
