"""Keyboard focus survives the live pages' redraws in a real browser, against real web and worker processes:
Scopes and Overview rebuild their tables each refresh, the Conversation page its list on each receipt and Undo,
and the control that had focus keeps it (walk findings 1, 2 and 3, /tmp/fix-a11y.walk-report.md). A redraw is
waited for by marking the old content and waiting until it is replaced, never by a fixed sleep."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.browser.pages import message, new_page, post, set_hidden

pytestmark = pytest.mark.integration

FOCUSED = "() => { const a = document.activeElement; return [a.tagName, a.getAttribute('aria-label') || a.getAttribute('href') || a.getAttribute('data-testid')]; }"


def _redrawn(page: Any, selector: str, trigger: Callable[[], None] = lambda: None) -> None:
    """Marks what ``selector`` finds, runs ``trigger``, and returns once the page has replaced it (redrawn)."""
    page.eval_on_selector(selector, "n => { n.dataset.old = '1'; }")
    trigger()
    page.wait_for_function(
        "s => { const n = document.querySelector(s); return n && !n.dataset.old; }", arg=selector
    )


def _redrawn_under_the_document(page: Any, url: str, message_id: str, change: str) -> None:
    """Once the document's dialog is open, a new message's receipt redraws the list (msg_s1's Open button too)."""
    from playwright.sync_api import expect

    expect(page.locator("#doc-dialog")).to_be_visible()

    def send() -> None:
        post(url, _skill_message(message_id, f'Update the skill "Release checklist": {change}'))

    _redrawn(page, '[data-message-id="msg_s1"] .receipt button', send)


def _focused(page: Any) -> list[str]:
    return list(page.evaluate(FOCUSED))


def test_scopes_keep_focus_on_a_row_button_across_refreshes(
    browser: Any, start_stack: Callable[..., str], page_errors: list[str]
) -> None:
    """Walk finding 1: a Resume button focused on Scopes keeps focus through a refresh; after Enter its row
    leaves the table (the resumed scope has no work) and focus goes to the table, not to <body>."""
    url = start_stack()
    for scope in ("topic:tpc_kbd", "topic:tpc_other"):
        assert httpx.post(f"{url}/v1/scopes/{scope}/pause", json={}, timeout=10).status_code == 200
    page = new_page(browser, page_errors)
    page.goto(f"{url}/#/scopes")
    resume = page.get_by_role("button", name="Resume topic:tpc_kbd")
    resume.focus()
    _redrawn(page, '[data-testid="scopes"] table')
    assert _focused(page) == ["BUTTON", "Resume topic:tpc_kbd"]

    page.keyboard.press("Enter")
    page.get_by_test_id("scopes-outcome").filter(has_text="Resumed topic:tpc_kbd").wait_for()
    page.locator('tr[data-scope-key="topic:tpc_kbd"]').wait_for(state="detached")
    _redrawn(page, '[data-testid="scopes"] table')
    assert _focused(page) == ["DIV", "Scopes"]
    assert page_errors == []


def test_overview_keeps_focus_on_a_link_across_a_refresh(
    browser: Any, start_stack: Callable[..., str], page_errors: list[str]
) -> None:
    """Walk finding 1: a link focused in the Overview's by-type table keeps focus when the page redraws."""
    url = start_stack()
    post(url, message("msg_kbd", "u1", "Hello"))
    page = new_page(browser, page_errors)
    page.goto(f"{url}/#/overview")
    link = page.locator('tr[data-source-type="agent.user.message"] a').first
    link.focus()
    before = _focused(page)
    # a tab shown again reads at once (app.js livePoll): the refresh comes now, not in 10 s
    _redrawn(page, '[data-testid="run-cards"]', lambda: set_hidden(page, False))
    assert _focused(page) == before
    assert page_errors == []


def _skill_message(source_id: str, text: str) -> dict[str, Any]:
    return {
        "sourceType": "agent.user.message",
        "sourceId": source_id,
        "userId": "u1",
        "agentId": "agt_1",
        "payload": {"agentId": "agt_1", "topicId": "tpc_kbd", "messageId": source_id, "message": text},
    }


def test_conversation_keeps_focus_and_announces_only_what_is_new(
    browser: Any, make_settings: Any, start_worker: Any, serve_web: Any, page_errors: list[str]
) -> None:
    """Walk findings 2 and 3: the message list is no live region; a new receipt is announced in one short
    sentence and leaves focus on the Open button it was on; Enter on Undo keeps focus on that button, announces
    the outcome, and the button's name says the outcome, not "Undo". A document's dialog gives focus back to its
    Open button when it closes, though the list was redrawn meanwhile. Leaving the page closes an open document
    (finding 7)."""
    from playwright.sync_api import expect

    settings = make_settings(max_attempts=1)
    start_worker(settings)
    _, url = serve_web(settings)
    page = new_page(browser, page_errors)
    page.goto(f"{url}/#/conversation?userId=u1&agentId=agt_1&topicId=tpc_kbd")
    post(url, _skill_message("msg_s1", 'Please create a skill called "Release checklist": run tests, tag.'))
    opener = page.locator('[data-message-id="msg_s1"] .receipt button', has_text="Open")
    opener.focus()
    before = _focused(page)

    post(url, _skill_message("msg_s2", 'Update the skill "Release checklist": also bump the changelog.'))
    page.locator('[data-message-id="msg_s2"] .receipt').wait_for(timeout=30_000)
    assert _focused(page) == before
    news = page.get_by_test_id("conversation-news")
    news.filter(has_text="New receipt: ").wait_for()
    assert len(news.inner_text()) < 200
    assert page.locator(".messages").get_attribute("aria-live") is None

    undo = page.locator('[data-message-id="msg_s2"] button[data-testid="undo"]')
    undo.focus()
    page.keyboard.press("Enter")
    page.locator('[data-message-id="msg_s2"] button[data-testid="undo"]:has-text("Reverted")').wait_for(
        timeout=15_000
    )
    assert page.evaluate("() => document.activeElement.dataset.testid") == "undo"
    assert (
        page.evaluate("() => document.activeElement.closest('[data-message-id]').dataset.messageId")
        == "msg_s2"
    )
    assert (undo.get_attribute("aria-label") or "").startswith("Reverted ")
    assert news.inner_text().startswith("Reverted: ")

    # a document's dialog gives focus back to its Open button, though a receipt redrew the list while it was open
    opener.focus()
    page.keyboard.press("Enter")
    _redrawn_under_the_document(page, url, "msg_s3", "also sign the tag.")
    page.keyboard.press("Escape")
    expect(page.locator("#doc-dialog")).to_be_hidden()
    page.wait_for_function("() => document.activeElement !== document.body")
    assert opener.evaluate("n => n === document.activeElement")

    # walk finding 7: a document left open does not stay over the next page, and its Open button, redrawn while
    # it was open, does not take focus from that page's heading once the dialog's close has run
    opener.click()
    _redrawn_under_the_document(page, url, "msg_s4", "also push the tag.")
    page.evaluate(
        "() => { window.docClosed = false; document.querySelector('#doc-dialog')"
        ".addEventListener('close', () => { window.docClosed = true; }, { once: true }); }"
    )
    page.evaluate("() => { location.hash = '#/dlq'; }")
    page.locator("main h2").filter(has_text="Dead letters").wait_for()
    expect(page.locator("#doc-dialog")).to_be_hidden()
    page.wait_for_function("() => window.docClosed === true")  # after the page's own close handler
    assert page.evaluate("() => document.activeElement === document.querySelector('main h2')")
    assert page_errors == []
