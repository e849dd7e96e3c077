"""The console's accessibility in a real browser, against real web and worker processes: colour contrast of the
computed colours (WCAG AA), scrolling boxes a keyboard reaches, a page that does not widen past the window, an
error banner written once, and a title and focused heading per page (walk findings 4, 5, 6, 8 and 10,
/tmp/fix-a11y.walk-report.md). No axe or npm: the contrast ratio is WCAG's formula, here."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.browser.pages import message, new_page, post, settled

pytestmark = pytest.mark.integration

# The colour of `sel`'s text (or, with `outline`, of its outline) and the first opaque background behind it.
COLOURS = """([sel, outline]) => {
  const n = document.querySelector(sel);
  const style = getComputedStyle(n);
  let p = outline ? n.parentElement : n;
  while (p && ['rgba(0, 0, 0, 0)', 'transparent'].includes(getComputedStyle(p).backgroundColor)) p = p.parentElement;
  return [outline ? style.outlineColor : style.color, p ? getComputedStyle(p).backgroundColor : 'rgb(255, 255, 255)'];
}"""


def _luminance(rgb: str) -> float:
    channels = [int(v) / 255 for v in re.findall(r"\d+", rgb)[:3]]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def _contrast(page: Any, selector: str, outline: bool = False) -> float:
    fg, bg = page.evaluate(COLOURS, [selector, outline])
    light, dark = sorted((_luminance(fg), _luminance(bg)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def test_text_and_the_focus_ring_reach_wcag_aa_contrast(
    browser: Any, start_stack: Callable[..., str], page_errors: list[str]
) -> None:
    """Walk finding 4: the active nav item, the green and orange badges and an outcome line reach 4.5:1, and
    the focus ring 3:1 against what is behind it."""
    url = start_stack()
    page = new_page(browser, page_errors)
    page.goto(f"{url}/#/scopes")
    page.get_by_label("Scope key").fill("topic:tpc_contrast")
    page.get_by_role("button", name="Pause", exact=True).click()
    page.locator('[data-testid="scope-state"].paused').wait_for()
    page.locator('[data-testid="workers"] .badge.alive').wait_for()
    page.get_by_test_id("scopes-outcome").filter(has_text="Paused").wait_for()
    for selector in (
        'nav a[aria-current="page"]',
        '[data-testid="scope-state"].paused',
        '[data-testid="workers"] .badge.alive',
        '[data-testid="scopes-outcome"].ok',
    ):
        assert _contrast(page, selector) >= 4.5, selector
    page.get_by_label("Scope key").focus()
    page.keyboard.press("Tab")  # the Pause button, focused by the keyboard: its ring shows
    assert _contrast(page, "button:focus-visible", outline=True) >= 3
    assert page_errors == []


SCROLLERS = """() => [...document.querySelectorAll('main *')].filter((n) => {
  const s = getComputedStyle(n);
  return /(auto|scroll)/.test(s.overflowX + s.overflowY) && n.scrollWidth > n.clientWidth + 1;
}).map((n) => [n.className || n.tagName, n.tabIndex, n.getAttribute('aria-label') || ''])"""


def test_boxes_that_scroll_are_reached_by_the_keyboard_and_named(
    browser: Any, start_stack: Callable[..., str], page_errors: list[str]
) -> None:
    """Walk finding 5: at 320 px the run page's payload and attempts table and the Overview's chart scroll;
    each is in the tab order, has a name, and shows the focus ring."""
    url = start_stack()
    event_id = post(url, message("msg_wide", "u1", "x" * 3000))
    settled(url, event_id, "done")
    page = new_page(browser, page_errors, width=320)
    for address, shown in (
        (f"#/runs/{event_id}", ['[data-testid="payload"]', '[data-testid="attempts"]']),
        ("#/overview", [".chart svg"]),
    ):
        page.goto(f"{url}/{address}")
        for selector in shown:
            page.locator(selector).wait_for()
        scrollers = page.evaluate(SCROLLERS)
        wanted = len(shown)
        assert len(scrollers) >= wanted, scrollers
        for kind, tab_index, name in scrollers:
            assert tab_index == 0 and name, (address, kind)
    page.locator(".chart").focus()
    assert page.eval_on_selector(".chart", "n => getComputedStyle(n).outlineStyle") != "none"
    assert page_errors == []


def test_a_long_topic_id_does_not_widen_the_conversation_page(
    browser: Any, start_stack: Callable[..., str], page_errors: list[str]
) -> None:
    """Walk finding 6: a 250-character topic id in "Recent conversations" leaves the page as wide as the window,
    at 1280 px, at 320 px and at 200 % zoom (640 CSS px)."""
    url = start_stack()
    topic = "t" * 250
    event = message("msg_long_topic", "u1", "Hello")
    event["payload"]["topicId"] = topic
    post(url, event)
    for width in (1280, 320, 640):
        page = new_page(browser, page_errors, width=width)
        page.goto(f"{url}/#/conversation")
        page.wait_for_function(
            "() => document.querySelector('select[aria-label=\"Recent conversations\"]').options.length > 1"
        )
        assert page.evaluate("() => document.documentElement.scrollWidth") <= width
        page.close()
    assert page_errors == []


def test_the_error_banner_is_written_once_while_the_api_stays_away(
    browser: Any, start_stack: Callable[..., str], page_errors: list[str]
) -> None:
    """Walk finding 8: while the API cannot be reached, each refresh fails with the same message, and the
    role="alert" banner is written once (a rewrite is announced again), not on each refresh."""
    url = start_stack()
    page = new_page(browser, page_errors)
    page.goto(f"{url}/#/scopes")
    page.get_by_test_id("workers").locator("tbody tr").first.wait_for()
    page.evaluate(
        "() => { window.bannerWrites = 0; new MutationObserver((m) => { window.bannerWrites += m.length; })"
        ".observe(document.querySelector('#error'), {childList: true, characterData: true, subtree: true}); }"
    )
    page.route("**/v1/**", lambda route: route.abort())
    page.locator("#error").filter(has_text="Cannot reach the API").wait_for()
    # three more refreshes: each sends its /v1/overview only once the one before it has ended
    for _ in range(3):
        with page.expect_request(lambda request: "/v1/overview" in request.url, timeout=30_000):
            pass
    assert page.evaluate("() => window.bannerWrites") == 1
    assert page_errors == []


def test_each_page_has_its_own_title_and_its_heading_takes_focus(
    browser: Any, start_stack: Callable[..., str], page_errors: list[str]
) -> None:
    """Walk finding 10: each page sets document.title from its heading, and opening it moves focus there."""
    url = start_stack()
    page = new_page(browser, page_errors)
    page.goto(f"{url}/#/runs")
    expected = {  # from the Runs page through every other one, and back
        "Dead letters": "Dead letters",
        "Send": "Send a test event",
        "Scopes & workers": "Scopes and workers",
        "Overview": "Overview",
        "Conversation": "Conversation",
        "Find by id": "Chain inspector",
        "Runs": "Runs",
    }
    for link, heading in expected.items():
        page.get_by_role("navigation").get_by_role("link", name=link, exact=True).click()
        page.locator("main h2").filter(has_text=heading).wait_for()
        assert page.title() == f"{heading} — Agent Signal"
        focused = page.evaluate(
            "() => `${document.activeElement.tagName} ${document.activeElement.textContent}`"
        )
        assert focused == f"H2 {heading}"
    assert page_errors == []


def test_the_api_docs_pages_name_their_language(start_stack: Callable[..., str]) -> None:
    """Walk finding 12: /docs and /redoc say they are in English, as the console does."""
    url = start_stack()
    for path in ("/docs", "/redoc"):
        page = httpx.get(f"{url}{path}", timeout=10)
        assert page.status_code == 200 and '<html lang="en">' in page.text, path


def test_a_right_to_left_override_in_a_query_stays_inside_it(
    browser: Any, start_stack: Callable[..., str], page_errors: list[str]
) -> None:
    """Walk finding 11: a U+202E in a Find by id query reverses only the query where the page echoes it, not the
    page's own words around it (each echo is isolated in a <bdi>)."""
    url = start_stack()
    query = "\u202eevil.exe"
    page = new_page(browser, page_errors)
    page.goto(f"{url}/#/chains")
    page.get_by_label("Event id, source id or chain id").fill(query)
    page.get_by_role("button", name="Inspect").click()
    refused = page.get_by_test_id("lookup-error")
    refused.wait_for()
    assert refused.locator("bdi").first.inner_text() == query
    assert page_errors == []
