"""The web UI in a real browser (Debian's Chromium driven by Playwright), against real web and worker
processes: receipts appear live under the right message, Undo reverts a skill, the chain inspector shows the
dominant path, and a dead event is redriven from the DLQ page. Screenshots go to the test's temp dir."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browser.pages import post

pytestmark = pytest.mark.integration

SHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


@pytest.fixture
def stack(make_settings: Any, start_worker: Any, serve_web: Any) -> str:
    settings = make_settings(max_attempts=1)
    start_worker(settings)
    _, url = serve_web(settings)
    return str(url)


def _message(source_id: str, text: str) -> dict[str, Any]:
    return {
        "sourceType": "agent.user.message",
        "sourceId": source_id,
        "userId": "u1",
        "agentId": "agt_1",
        "payload": {"agentId": "agt_1", "topicId": "tpc_ui", "messageId": source_id, "message": text},
    }


def _reply(reply_id: str, to: str, text: str) -> dict[str, Any]:
    return {
        "sourceType": "client.runtime.complete",
        "sourceId": f"op_{reply_id}:client:complete",
        "userId": "u1",
        "agentId": "agt_1",
        "payload": {
            "agentId": "agt_1",
            "topicId": "tpc_ui",
            "operationId": f"op_{reply_id}",
            "status": "completed",
            "assistantMessageId": reply_id,
            "triggerMessageId": to,
            "assistantContent": text,
        },
    }


def test_receipts_undo_chain_and_dlq(
    browser: Any, stack: str, tmp_path: Path, redis_client: Any, keys: Any
) -> None:
    """The four journeys a user and an operator take, each ending in a screenshot."""
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{stack}/#/conversation?userId=u1&agentId=agt_1&topicId=tpc_ui")
    page.wait_for_selector("text=No messages in this conversation yet")

    # 1. a feedback event through the API → the memory receipt appears under the assistant reply, live.
    post(stack, _reply("msg_a1", "msg_u0", "Here is a long, detailed answer."))
    post(stack, _message("msg_u1", "Going forward, I prefer concise answers."))
    post(stack, _reply("msg_a2", "msg_u1", "Understood, I will keep it short."))
    receipt = page.wait_for_selector(
        '[data-message-id="msg_a2"] .receipt[data-kind="memory"]', timeout=30_000
    )
    assert "I prefer concise answers." in receipt.inner_text()
    assert page.locator('[data-message-id="msg_a1"] .receipt').count() == 0
    page.screenshot(path=str(tmp_path / "conversation.png"), full_page=True)
    if os.environ.get("UPDATE_README_SCREENSHOTS"):  # `make screenshots` refreshes the README's tour
        SHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tmp_path / "conversation.png", SHOTS / "conversation.png")

    # 2. Undo on a skill receipt → Reverted.
    post(
        stack,
        _message("msg_s1", 'Please create a skill called "Release checklist": run tests, tag, publish.'),
    )
    post(stack, _message("msg_s2", 'Update the skill "Release checklist": also bump the changelog.'))
    undo = page.locator('[data-message-id="msg_s2"] button[data-testid="undo"]')
    undo.wait_for(timeout=30_000)
    assert undo.inner_text() == "Undo"
    undo.dblclick()  # the second click lands on the pending (disabled) button and is ignored
    page.wait_for_selector(
        '[data-message-id="msg_s2"] button[data-testid="undo"]:has-text("Reverted")', timeout=15_000
    )
    # the receipt's badge says what happened to it now, not "applied"
    badge = page.locator('[data-message-id="msg_s2"] [data-testid="receipt-status"]')
    assert badge.inner_text() == "reverted"
    page.screenshot(path=str(tmp_path / "undo.png"), full_page=True)

    # 3. The chain inspector shows the dominant path.
    page.goto(f"{stack}/#/chains?q=msg_u1")
    path = page.wait_for_selector('[data-testid="dominant-path"]', timeout=15_000)
    assert path.inner_text() == (
        "agent.user.message → signal.feedback.satisfaction → signal.feedback.domain.memory → signal.action.applied → action.user-memory.handle"
    )
    assert page.locator("svg .node.dominant").count() >= 4
    page.screenshot(path=str(tmp_path / "chain.png"), full_page=True)

    # 4. Redrive a dead event from the DLQ page and see it done (its handler is fixed in between).
    _redrive_from_the_dlq_page(page, stack, tmp_path, redis_client, keys)
    # Phone width: the conversation still fits (no horizontal scrolling), controls keep their labels.
    _conversation_at_phone_width(browser, stack, tmp_path)

    # Overview renders with counts and a chart.
    page.goto(f"{stack}/#/overview")
    page.wait_for_selector("text=Events by source type and status")
    page.screenshot(path=str(tmp_path / "overview.png"), full_page=True)
    assert errors == []
    shutil.copytree(tmp_path, Path("/tmp/agent-signal-ui-screenshots"), dirs_exist_ok=True)


def _redrive_from_the_dlq_page(page: Any, stack: str, tmp_path: Path, redis_client: Any, keys: Any) -> None:
    """A flaky event goes dead, shows on the DLQ page with its error, and after its handler is fixed the
    page's Redrive button brings it to done."""
    dead = post(
        stack, {"sourceType": "test.flaky", "sourceId": "flaky-ui", "scopeKey": "topic:dlq", "payload": {}}
    )
    for _ in range(120):
        if httpx.get(f"{stack}/v1/events/{dead}").json()["status"] == "dead":
            break
        page.wait_for_timeout(250)
    page.goto(f"{stack}/#/dlq")
    row = page.locator(f'tr[data-event-id="{dead}"]')
    row.wait_for(timeout=15_000)
    assert "flaky handler is broken" in row.inner_text()
    page.screenshot(path=str(tmp_path / "dlq.png"), full_page=True)
    redis_client.set(f"{keys.bucket_prefix}test:fixed", "1")
    page.locator(f'tr[data-event-id="{dead}"] button:has-text("Redrive")').click()
    page.wait_for_selector(
        f'tr[data-event-id="{dead}"] [data-testid="dlq-status"]:has-text("done")', timeout=30_000
    )
    assert httpx.get(f"{stack}/v1/events/{dead}").json()["status"] == "done"
    page.screenshot(path=str(tmp_path / "dlq-redriven.png"), full_page=True)


def _conversation_at_phone_width(browser: Any, stack: str, tmp_path: Path) -> None:
    """At 390 px the conversation fits without horizontal scrolling and the controls keep their labels."""
    phone = browser.new_page(viewport={"width": 390, "height": 844})
    phone.goto(f"{stack}/#/conversation?userId=u1&agentId=agt_1&topicId=tpc_ui")
    phone.wait_for_selector('[data-message-id="msg_a2"] .receipt')
    assert phone.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    assert phone.get_by_label("Topic").input_value() == "tpc_ui"
    phone.screenshot(path=str(tmp_path / "conversation-phone.png"), full_page=True)
    phone.close()


def test_the_conversation_page_keeps_its_user_for_the_tab_only(
    browser: Any, make_settings: Any, serve_web: Any
) -> None:
    """The user, agent and topic last viewed are kept in sessionStorage (the tab's life, as the token is), never
    in localStorage, where the next person at a shared browser found them; an older version's entry is removed."""
    _, url = serve_web(make_settings())
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{url}/")
    page.evaluate("localStorage.setItem('agentSignalOwner', JSON.stringify({userId: 'u_left'}))")
    page.goto(f"{url}/#/conversation?userId=u_tab&agentId=agt_1&topicId=tpc_tab")
    page.reload()  # the hash route again, and app.js run afresh: the older entry goes at load
    page.wait_for_function("() => sessionStorage.getItem('agentSignalOwner') !== null")
    assert page.evaluate("JSON.parse(sessionStorage.getItem('agentSignalOwner')).userId") == "u_tab"
    assert page.evaluate("localStorage.getItem('agentSignalOwner')") is None
    assert errors == []
