"""The Runs and Dead-letter tables stay readable at 1280 and 1920 px (issue 28, item 5), in a real browser against
a real worker: runs that succeed, runs whose long error dead-letters them, and a discard made in the workbench.
Checked with element boxes: no row taller than a few lines, the Error column the widest, ids and times on one line
with their full value in a title, and every row's buttons inside the table's scroll box and the viewport, hit by a
click at their centre, after the discard too. A screenshot per width has the viewport's size, and the full page is
no wider than the viewport. Every wait is on page content or the API, never a fixed sleep."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.browser.pages import flaky, message, new_page, post, settled, status_in

pytestmark = pytest.mark.integration

# The two widths, and a narrower window where the tables scroll inside their box (the buttons stay pinned).
WIDTHS = [(1280, 900), (1920, 1080), (1024, 768)]
CLAMP_NAME_CHARS = 200  # producers/ui/cells.js: how much of an error its title and accessible name hold
# An error as long as a real one: a sentence, then an unbroken token (a JSON body quoted by a parser's error), so
# the cell must both wrap words and break a token; each dead event's error differs in its first words.
LONG_TOKEN = (
    '{"order":{"id":"ord_7Hq2","lines":['
    + ",".join(f'{{"sku":"SKU-{i:04d}","qty":{i}}}' for i in range(24))
    + "]}}"
)
LONG_ERROR = (
    "upstream refused the order payload because a line item has no price; the parser quoted what it read: "
)
# A row may hold the clamped error (3 lines) and a button or badge a little taller than a line: 4 lines of the
# cell's text plus its vertical padding and border is the most a row may take. Before the fix, an error of this
# length in a 60 px column took dozens of lines (one or two characters each).
ROW_LINES_MAX = 4


def _fill(stack: str) -> tuple[list[str], list[str]]:
    """Three runs that succeed and three whose long error kills them on their only attempt."""
    done = [post(stack, message(f"msg_fit_{i}", f"u_fit_{i}", f"Question {i}")) for i in range(3)]
    dead = [
        post(stack, flaky(f"flaky-fit-{i}-{'x' * 40}", {"errorText": f"case {i}: {LONG_ERROR}{LONG_TOKEN}"}))
        for i in range(3)
    ]
    for event_id in done:
        settled(stack, event_id, "done")
    for event_id in dead:
        settled(stack, event_id, "dead")
    return done, dead


def _row_bound_px(page: Any, table: str) -> float:
    """The tallest a row of ``table`` may be: ROW_LINES_MAX lines of its cells' text, plus padding and border."""
    return float(
        page.evaluate(
            """([sel, lines]) => {
                const s = getComputedStyle(document.querySelector(`${sel} tbody td`));
                return lines * parseFloat(s.lineHeight) + parseFloat(s.paddingTop) + parseFloat(s.paddingBottom) + 1;
            }""",
            [table, ROW_LINES_MAX],
        )
    )


def _assert_rows_fit(page: Any, table: str, rows: int) -> None:
    """Each data row is at most ROW_LINES_MAX lines tall; the Error column is the widest; one-line cells carry
    their full value in a title, and the clamped error its first CLAMP_NAME_CHARS characters."""
    bound_px = _row_bound_px(page, table)
    body = page.locator(f"{table} tbody tr[data-event-id]")
    assert body.count() == rows
    for i in range(rows):
        row = body.nth(i)
        box = row.bounding_box()
        assert box is not None and box["height"] <= bound_px, (table, i, box, bound_px)
        widths = [c.bounding_box()["width"] for c in row.locator(":scope > td").all()]
        error = row.locator("td.err")
        assert error.bounding_box()["width"] == max(widths), (table, i, widths)
        for cell in row.locator("td.clip").all():  # ids, times, types: one line, the full value on hover
            assert cell.evaluate("c => getComputedStyle(c).whiteSpace") == "nowrap"
            assert (cell.get_attribute("title") or "") == cell.text_content()
        whole = error.locator(".clamp > span:not(.visually-hidden)")
        if whole.count():  # a long error is named and titled by its start (walk finding 9); a click shows all
            text = whole.text_content() or ""
            brief = text if len(text) <= CLAMP_NAME_CHARS else f"{text[:CLAMP_NAME_CHARS]}…"
            assert error.locator("[title]").get_attribute("title") == brief


def _assert_buttons_reachable(page: Any, table: str, width: int, height: int) -> None:
    """Every button of every row lies inside the table's scroll box and the viewport, and a click at its centre
    lands on it (nothing covers it); enabled ones pass Playwright's actionability checks."""
    wrap = page.locator(f".table-wrap:has({table})")
    buttons = page.locator(f"{table} tbody tr[data-event-id] button")
    assert buttons.count() > 0
    for button in buttons.all():
        button.scroll_into_view_if_needed()
        outer, box = wrap.bounding_box(), button.bounding_box()
        assert button.is_visible() and box is not None and outer is not None
        assert outer["x"] <= box["x"] and box["x"] + box["width"] <= outer["x"] + outer["width"], (box, outer)
        assert 0 <= box["x"] and box["x"] + box["width"] <= width, (box, width)
        assert 0 <= box["y"] and box["y"] + box["height"] <= height, (box, height)
        hit = button.evaluate(
            "(b, [x, y]) => b.contains(document.elementFromPoint(x, y))",
            [box["x"] + box["width"] / 2, box["y"] + box["height"] / 2],
        )
        assert hit, button.get_attribute("aria-label")
        if button.is_enabled():
            button.click(trial=True)


def _scrolls_sideways(page: Any, table: str) -> bool:
    """Whether ``table`` is wider than its scroll box: never from 1280 px up, by design below its min-width."""
    return bool(page.locator(f".table-wrap:has({table})").evaluate("w => w.scrollWidth > w.clientWidth"))


def _png_size(path: Path) -> tuple[int, int]:
    width, height = struct.unpack(
        ">II", path.read_bytes()[16:24]
    )  # the IHDR chunk: 8-byte signature, 8 header
    return int(width), int(height)


def _assert_screenshot_fits(page: Any, tmp_path: Path, name: str, width: int, height: int) -> None:
    """A viewport screenshot has the viewport's size; the full page is exactly as wide (nothing sticks out)."""
    view, full = tmp_path / f"{name}-{width}.png", tmp_path / f"{name}-{width}-full.png"
    page.screenshot(path=str(view))
    page.screenshot(path=str(full), full_page=True)
    assert _png_size(view) == (width, height)
    assert _png_size(full)[0] == width


@pytest.mark.parametrize(("width", "height"), WIDTHS)
def test_runs_and_dead_letter_tables_fit_the_width(
    browser: Any,
    start_stack: Callable[..., str],
    tmp_path: Path,
    page_errors: list[str],
    width: int,
    height: int,
) -> None:
    """At 1280 and 1920 px (and 1024, scrolling in their box) both tables keep rows a few lines tall with the Error column widest, an error expands
    in place, and the dead-letter rows' buttons stay reachable before and after one row is discarded."""
    from playwright.sync_api import expect

    # Given runs that succeeded and runs dead of a long error
    stack = start_stack(max_attempts=1)
    done, dead = _fill(stack)
    page = new_page(browser, page_errors, width, height)

    # Then the Runs table fits: short rows, the Error column widest, full values on hover
    page.goto(f"{stack}/#/runs")
    for event_id in done + dead:
        page.wait_for_selector(f'table.runs tr[data-event-id="{event_id}"]')
    _assert_rows_fit(page, "table.runs", len(done + dead))
    assert _scrolls_sideways(page, "table.runs") == (width < 1280)
    _assert_screenshot_fits(page, tmp_path, "runs", width, height)

    # When an error is clicked it shows in full, and a second click clamps it again
    clamp = page.locator(f'table.runs tr[data-event-id="{dead[0]}"] td.err [title]')
    clamped_px = clamp.bounding_box()["height"]
    clamp.click()
    expect(clamp).to_have_attribute("aria-expanded", "true")
    assert (
        clamp.evaluate("c => c.scrollHeight <= c.clientHeight")
        and clamp.bounding_box()["height"] > clamped_px
    )
    clamp.click()
    expect(clamp).to_have_attribute("aria-expanded", "false")

    # And the Dead letters table fits, every row's buttons reachable
    page.goto(f"{stack}/#/dlq")
    for event_id in dead:
        page.wait_for_selector(f'table.dlq tr[data-event-id="{event_id}"]')
    _assert_rows_fit(page, "table.dlq", len(dead))
    _assert_buttons_reachable(page, "table.dlq", width, height)

    # When one row is discarded with a reason in the workbench
    dropped = dead[0]
    row = page.locator(f'tr[data-event-id="{dropped}"]')
    row.get_by_role("button", name=f"Payload of {dropped}").click()
    detail = page.locator(f'tr[data-detail-for="{dropped}"]')
    detail.get_by_test_id("discard-reason").fill("superseded by the corrected order sent later by the shop")
    detail.get_by_role("button", name="Discard", exact=True).click()
    status_in(page, f'tr[data-event-id="{dropped}"]', "discarded", "dlq-status")
    row.get_by_role("button", name=f"Payload of {dropped}").click()  # close its editor again
    expect(detail).to_be_hidden()

    # Then the rows still fit and every button, the discarded row's too, is reachable
    _assert_rows_fit(page, "table.dlq", len(dead))
    assert _scrolls_sideways(page, "table.dlq") == (width < 1280)
    _assert_buttons_reachable(page, "table.dlq", width, height)
    _assert_screenshot_fits(page, tmp_path, "dlq", width, height)

    # And the Discarded list fits too
    page.get_by_role("link", name="Discarded").click()
    page.wait_for_selector(f'table.discarded tr[data-event-id="{dropped}"]')
    _assert_rows_fit(page, "table.discarded", 1)
    assert page_errors == []
