"""How the console verbs print what the API answered: ``--json`` prints its JSON; otherwise a table.

One rule, by where stdout goes:

* **a terminal**: a header, then one line per row in fixed columns; a cell longer than its column's width ends in
  ``…`` (the last column takes what is left of the terminal's width, at least its own); times are UTC;
* **anything else** (a pipe, a file): the same header and rows as tab-separated lines, cells in full (tabs and
  line breaks inside a cell become spaces), for ``cut`` and ``awk``.

A cell is one line either way. Widths count East Asian wide characters as two columns (feedback text is often
Chinese), so columns stay aligned.
"""

from __future__ import annotations

import json
import shutil
import sys
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TextIO

__all__ = ["Column", "duration_ms", "print_json", "print_record", "print_table", "utc_ms"]

ELLIPSIS = "…"
GAP = "  "


@dataclass(frozen=True)
class Column:
    """A column: its header, how a row gives its cell, and its width on a terminal."""

    header: str
    cell: Callable[[dict[str, Any]], Any]
    width: int


def utc_ms(value: Any) -> str:
    """Unix milliseconds as ``YYYY-MM-DD HH:MM:SS`` UTC; empty when absent."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return ""
    try:
        return datetime.fromtimestamp(value / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):  # past year 9999 (stored before the door refused one), NaN
        return f"{value} ms"


def duration_ms(value: Any) -> str:
    """Milliseconds as ``850ms``, ``12.3s``, ``4m05s``, ``2h03m``; empty when absent."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return ""
    if value < 1000:
        return f"{int(value)}ms"
    seconds = value / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    return f"{minutes // 60}h{minutes % 60:02d}m"


def _text(value: Any) -> str:
    """A cell's text on one line: None is empty, booleans are yes/no, containers are JSON."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict | list):
        value = json.dumps(value, ensure_ascii=False)
    return " ".join(str(value).split())


def _columns_of(char: str) -> int:
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def _width(text: str) -> int:
    return sum(_columns_of(c) for c in text)


def _fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` columns (ending in …) and padded to it."""
    if _width(text) > width:
        kept, used = [], 0
        for char in text:
            if used + _columns_of(char) > width - 1:
                break
            kept.append(char)
            used += _columns_of(char)
        text = "".join(kept) + ELLIPSIS
    return text + " " * (width - _width(text))


def print_table(
    rows: Sequence[dict[str, Any]], columns: Sequence[Column], *, empty: str, out: TextIO | None = None
) -> None:
    """``rows`` under ``columns`` by the module's rule; on a terminal ``empty`` is printed when there is none."""
    out = out or sys.stdout
    cells = [[_text(column.cell(row)) for column in columns] for row in rows]
    headers = [column.header for column in columns]
    if not out.isatty():
        for line in [headers, *cells]:
            out.write("\t".join(line) + "\n")
        return
    widths = [
        max(min(column.width, max((_width(line[i]) for line in cells), default=0)), len(column.header))
        for i, column in enumerate(columns)
    ]
    room = shutil.get_terminal_size().columns - sum(widths[:-1]) - len(GAP) * (len(widths) - 1)
    widths[-1] = max(widths[-1], min(room, max((_width(line[-1]) for line in cells), default=0)))
    for line in [headers, *cells]:
        out.write(
            GAP.join(_fit(text, width) for text, width in zip(line, widths, strict=True)).rstrip() + "\n"
        )
    if not cells:
        out.write(f"({empty})\n")


def print_record(pairs: Sequence[tuple[str, Any]], *, out: TextIO | None = None) -> None:
    """One object as ``name: value`` lines on a terminal (``name<TAB>value`` otherwise); empty values left out."""
    out = out or sys.stdout
    shown = [(name, _text(value)) for name, value in pairs if _text(value)]
    if not out.isatty():
        for name, text in shown:
            out.write(f"{name}\t{text}\n")
        return
    width = max((len(name) for name, _ in shown), default=0) + 1
    for name, text in shown:
        out.write(f"{name + ':':<{width}} {text}\n")


def print_json(value: Any, *, out: TextIO | None = None) -> None:
    """The API's JSON, indented."""
    (out or sys.stdout).write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")
