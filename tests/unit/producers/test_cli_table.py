"""The console verbs' table rule (producers/cli/console/table.py): fixed, cut columns on a terminal, whole
tab-separated cells elsewhere; wide characters count two columns so the columns stay aligned."""

from __future__ import annotations

import io

import pytest

from producers.cli.console.table import Column, duration_ms, print_record, print_table, utc_ms

COLUMNS = (Column("ID", lambda r: r["id"], 6), Column("TEXT", lambda r: r["text"], 8))
ROWS = [{"id": "a", "text": "short"}, {"id": "bbbbbbbbbb", "text": "你好世界你好世界"}]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_terminal_cuts_and_aligns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cells are cut to their column with …, wide characters are two columns, every line the same layout."""
    monkeypatch.setenv("COLUMNS", "14")
    out = Terminal()
    print_table(ROWS, COLUMNS, empty="nothing", out=out)
    assert out.getvalue().splitlines() == ["ID      TEXT", "a       short", "bbbbb…  你好世…"]


def test_pipe_is_whole_tab_separated_cells() -> None:
    """Off a terminal: header and rows joined by tabs, nothing cut; a tab or line break in a cell is a space."""
    out = io.StringIO()
    print_table([*ROWS, {"id": "c", "text": "two\tparts\nand a line"}], COLUMNS, empty="nothing", out=out)
    assert out.getvalue().splitlines() == [
        "ID\tTEXT",
        "a\tshort",
        "bbbbbbbbbb\t你好世界你好世界",
        "c\ttwo parts and a line",
    ]


def test_empty_says_so_on_a_terminal_only() -> None:
    """No rows: the header, then the message on a terminal; only the header in a pipe (for scripts)."""
    terminal, pipe = Terminal(), io.StringIO()
    print_table([], COLUMNS, empty="no runs", out=terminal)
    print_table([], COLUMNS, empty="no runs", out=pipe)
    assert terminal.getvalue().splitlines() == ["ID  TEXT", "(no runs)"]
    assert pipe.getvalue() == "ID\tTEXT\n"


def test_record_and_cells() -> None:
    """A record leaves out empty values; times are UTC, durations short, booleans yes/no."""
    out = Terminal()
    print_record([("status", "dead"), ("error", None), ("paused", False)], out=out)
    assert out.getvalue().splitlines() == ["status: dead", "paused: no"]
    assert utc_ms(0) == "1970-01-01 00:00:00" and utc_ms(None) == ""
    # a time stored before the door refused one past year 9999 is shown, not raised on
    assert utc_ms(10**20) == f"{10**20} ms" and utc_ms(float("nan")) == "nan ms"
    assert [duration_ms(v) for v in (850, 12_300, 245_000, 7_380_000)] == ["850ms", "12.3s", "4m05s", "2h03m"]
